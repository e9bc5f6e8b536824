//! [`ReplyReader`]: an assistant reply read for what every chat API shows separately —
//! reasoning, answer text and tool calls — while it streams ([`ReplyReader::push`]) or whole
//! ([`Reply::read`]). The chat completions, Messages and Responses routes all read replies here,
//! so the three APIs split a reply the same way.
//!
//! ```text
//! token text ─► ReplySplitter ─► Reasoning ─────────────────────────► ReplyEvent::Reasoning
//!                             ├► Content ─► ToolReplyStream (tools) ─► ReplyEvent::Content
//!                             │                                    └─► ReplyEvent::Call
//!                             └► ToolCall (harmony; tools on auto) ──► ReplyEvent::Call
//! ```
//!
//! A harmony tool call is whole when its message ends, so it is sent then; without tools (or
//! with a forced choice, whose reply is bare JSON) its arguments are answer text.

use kestrel_engine::api::TokenEvent;

use crate::openai::tool_reply::{self, ToolReplyStream};
use crate::reasoning::{Piece, ReasoningMode, ReplySplitter};
use crate::tools::{StreamEvent, ToolCall, ToolChoice};
use crate::validation::chat_tools::ToolMode;

/// Something a streamed reply can send.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyEvent {
    /// More reasoning text.
    Reasoning(String),
    /// More answer text.
    Content(String),
    /// A complete call, the `index`-th of the reply.
    Call { index: usize, call: ToolCall },
}

/// Reads one streamed reply.
#[derive(Debug)]
pub struct ReplyReader {
    reasoning: Option<ReplySplitter>,
    tools: Option<ToolReplyStream>,
    /// The tool mode, when harmony calls are read as calls (`auto`).
    harmony_calls: Option<ToolMode>,
    /// Harmony calls sent so far.
    calls_sent: usize,
}

impl ReplyReader {
    /// A reader splitting reasoning when `reasoning` is set and reading calls under `tools`.
    pub fn new(reasoning: Option<ReasoningMode>, tools: Option<&ToolMode>) -> Self {
        ReplyReader {
            reasoning: reasoning.map(ReplySplitter::new),
            tools: tools.map(ToolReplyStream::new),
            harmony_calls: tools.filter(|m| m.choice == ToolChoice::Auto).cloned(),
            calls_sent: 0,
        }
    }

    /// What can be sent once `text` (one token's text) is added.
    pub fn push(&mut self, text: &str) -> Vec<ReplyEvent> {
        let pieces = match &mut self.reasoning {
            Some(s) => s.push(text),
            None => vec![Piece::Content(text.to_string())],
        };
        self.route(pieces)
    }

    /// The rest at the end of the reply: held-back text and the calls.
    pub fn finish(&mut self) -> Vec<ReplyEvent> {
        let pieces = self
            .reasoning
            .as_mut()
            .map(|s| s.finish())
            .unwrap_or_default();
        let mut out = self.route(pieces);
        if let Some(tools) = self.tools.take() {
            let offset = self.calls_sent;
            out.extend(
                tools
                    .finish()
                    .into_iter()
                    .map(|e| match ReplyEvent::from(e) {
                        ReplyEvent::Call { index, call } => ReplyEvent::Call {
                            index: index + offset,
                            call,
                        },
                        other => other,
                    }),
            );
        }
        out
    }

    /// Tokens of the reasoning block so far.
    pub fn reasoning_tokens(&self) -> usize {
        self.reasoning
            .as_ref()
            .map_or(0, ReplySplitter::reasoning_tokens)
    }

    fn route(&mut self, pieces: Vec<Piece>) -> Vec<ReplyEvent> {
        let mut out = Vec::new();
        for piece in pieces {
            match (piece, &mut self.tools) {
                (Piece::Reasoning(t), _) => out.push(ReplyEvent::Reasoning(t)),
                (Piece::Content(t), Some(tools)) => {
                    out.extend(tools.push(&t).into_iter().map(ReplyEvent::from));
                }
                (Piece::Content(t), None) if t.is_empty() => {}
                (Piece::Content(t), None) => out.push(ReplyEvent::Content(t)),
                (Piece::ToolCall { name, arguments }, _) => {
                    match harmony_call(self.harmony_calls.as_ref(), name, &arguments) {
                        Some(call) => {
                            let index = self.calls_sent;
                            self.calls_sent += 1;
                            out.push(ReplyEvent::Call { index, call });
                        }
                        None => out.push(ReplyEvent::Content(arguments)),
                    }
                }
            }
        }
        out
    }
}

/// A harmony call as an API call, when calls are read (`mode`) and its arguments are a JSON
/// object; `None`: its arguments are answer text.
fn harmony_call(mode: Option<&ToolMode>, name: String, arguments: &str) -> Option<ToolCall> {
    let mode = mode?;
    let args: serde_json::Value = serde_json::from_str(arguments.trim()).ok()?;
    args.is_object()
        .then(|| ToolCall::new(name, &args, mode.format.new_call_id()))
}

impl From<StreamEvent> for ReplyEvent {
    fn from(e: StreamEvent) -> Self {
        match e {
            StreamEvent::Content(t) => ReplyEvent::Content(t),
            StreamEvent::Call { index, call } => ReplyEvent::Call { index, call },
        }
    }
}

/// A whole reply, read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// The reasoning block's text; `None` when the reply has none.
    pub reasoning: Option<String>,
    /// The answer; `None` when the reply is only tool calls (or only reasoning).
    pub content: Option<String>,
    pub calls: Vec<ToolCall>,
    /// Tokens of the reasoning block.
    pub reasoning_tokens: usize,
}

impl Reply {
    /// Reads a finished reply: its `tokens`, then the withheld `tail`. The answer is read for
    /// calls whole, as a non-streamed reply always was.
    pub fn read(
        reasoning: Option<ReasoningMode>,
        tools: Option<&ToolMode>,
        tokens: &[TokenEvent],
        tail: &str,
    ) -> Reply {
        let mut splitter = reasoning.map(ReplySplitter::new);
        let (mut thought, mut answer) = (String::new(), String::new());
        let mut harmony = Vec::new();
        let texts = tokens.iter().map(|t| t.text.as_str()).chain([tail]);
        for text in texts {
            let pieces = match &mut splitter {
                Some(s) => s.push(text),
                None => vec![Piece::Content(text.to_string())],
            };
            collect(pieces, &mut thought, &mut answer, &mut harmony);
        }
        if let Some(s) = &mut splitter {
            collect(s.finish(), &mut thought, &mut answer, &mut harmony);
        }
        let auto = tools.filter(|m| m.choice == ToolChoice::Auto);
        let mut calls = Vec::new();
        for (name, arguments) in harmony {
            match harmony_call(auto, name, &arguments) {
                Some(call) => calls.push(call),
                None => answer.push_str(&arguments),
            }
        }
        let (content, more) = match tools {
            None => (Some(answer), Vec::new()),
            Some(mode) => tool_reply::split(mode, &answer),
        };
        calls.extend(more);
        let content = content.filter(|c| calls.is_empty() || !c.trim().is_empty());
        let has_reasoning = splitter.is_some() && !thought.is_empty();
        Reply {
            content: content.filter(|c| !(has_reasoning && c.is_empty())),
            reasoning: has_reasoning.then_some(thought),
            calls,
            reasoning_tokens: splitter.map_or(0, |s| s.reasoning_tokens()),
        }
    }
}

/// Adds `pieces` to the reasoning, the answer and the harmony calls (name, arguments).
fn collect(
    pieces: Vec<Piece>,
    thought: &mut String,
    answer: &mut String,
    calls: &mut Vec<(String, String)>,
) {
    for p in pieces {
        match p {
            Piece::Reasoning(t) => thought.push_str(&t),
            Piece::Content(t) => answer.push_str(&t),
            Piece::ToolCall { name, arguments } => calls.push((name, arguments)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolCallFormat;

    const HARMONY: ReasoningMode = ReasoningMode {
        opened_by_prompt: false,
        harmony: true,
    };

    fn auto() -> ToolMode {
        ToolMode {
            choice: ToolChoice::Auto,
            format: ToolCallFormat::Harmony,
        }
    }

    /// A harmony reply with reasoning, a preamble on commentary and two calls, one token per
    /// marker or word.
    const PIECES: [&str; 20] = [
        "<|channel|>",
        "analysis",
        "<|message|>",
        "Two calls.",
        "<|end|>",
        "<|start|>",
        "assistant",
        "<|channel|>",
        "commentary",
        "<|message|>",
        "Checking.",
        "<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json",
        "<|message|>",
        "{\"city\":\"Paris\"}",
        "<|call|>",
        "<|start|>assistant<|channel|>commentary to=functions.add <|constrain|>json",
        "<|message|>",
        "{\"a\":1,\"b\":2}",
        "<|call|>",
    ];

    fn tokens() -> Vec<TokenEvent> {
        PIECES
            .iter()
            .enumerate()
            .map(|(i, t)| TokenEvent {
                id: i as u32,
                text: t.to_string(),
                logprobs: None,
            })
            .collect()
    }

    #[test]
    fn a_whole_harmony_reply_reads_into_reasoning_answer_and_calls() {
        let reply = Reply::read(Some(HARMONY), Some(&auto()), &tokens(), "");
        assert_eq!(reply.reasoning.as_deref(), Some("Two calls."));
        assert_eq!(reply.content.as_deref(), Some("Checking."));
        let calls: Vec<(&str, &str)> = reply
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("get_weather", r#"{"city":"Paris"}"#),
                ("add", r#"{"a":1,"b":2}"#)
            ]
        );
        assert_eq!(reply.reasoning_tokens, 3);
    }

    #[test]
    fn a_streamed_harmony_reply_sends_the_same_and_numbers_its_calls() {
        let mut reader = ReplyReader::new(Some(HARMONY), Some(&auto()));
        let mut events: Vec<ReplyEvent> = PIECES.iter().flat_map(|p| reader.push(p)).collect();
        events.extend(reader.finish());
        let mut indices = Vec::new();
        let (mut reasoning, mut content) = (String::new(), String::new());
        for e in events {
            match e {
                ReplyEvent::Reasoning(t) => reasoning.push_str(&t),
                ReplyEvent::Content(t) => content.push_str(&t),
                ReplyEvent::Call { index, call } => indices.push((index, call.name)),
            }
        }
        assert_eq!(
            (reasoning.as_str(), content.as_str()),
            ("Two calls.", "Checking.")
        );
        assert_eq!(indices, [(0, "get_weather".into()), (1, "add".into())]);
    }

    #[test]
    fn without_tools_harmony_calls_are_answer_text() {
        let reply = Reply::read(Some(HARMONY), None, &tokens(), "");
        assert!(reply.calls.is_empty());
        assert_eq!(
            reply.content.as_deref(),
            Some(r#"Checking.{"city":"Paris"}{"a":1,"b":2}"#)
        );
    }

    #[test]
    fn the_harmony_tool_format_reads_a_reply_no_splitter_read() {
        let reply = Reply::read(None, Some(&auto()), &tokens(), "");
        assert_eq!(reply.calls.len(), 2);
        assert_eq!(reply.content.as_deref(), Some("Two calls.Checking."));
    }
}
