//! [`ReplyReader`]: an assistant reply read for what every chat API shows separately —
//! reasoning, answer text and tool calls — while it streams ([`ReplyReader::push`]) or whole
//! ([`Reply::read`]). The chat completions, Messages and Responses routes all read replies here,
//! so the three APIs split a reply the same way.
//!
//! ```text
//! token text ─► ReasoningSplitter ─► Reasoning ─────────────────────────► ReplyEvent::Reasoning
//!                                 └► Content ─► ToolReplyStream (tools) ─► ReplyEvent::Content
//!                                                                      └─► ReplyEvent::Call
//! ```

use kestrel_engine::api::TokenEvent;

use crate::openai::tool_reply::{self, ToolReplyStream};
use crate::reasoning::{Piece, ReasoningMode, ReasoningSplitter};
use crate::tools::{StreamEvent, ToolCall};
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
    reasoning: Option<ReasoningSplitter>,
    tools: Option<ToolReplyStream>,
}

impl ReplyReader {
    /// A reader splitting reasoning when `reasoning` is set and reading calls under `tools`.
    pub fn new(reasoning: Option<ReasoningMode>, tools: Option<&ToolMode>) -> Self {
        ReplyReader {
            reasoning: reasoning.map(ReasoningSplitter::new),
            tools: tools.map(ToolReplyStream::new),
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
            out.extend(tools.finish().into_iter().map(ReplyEvent::from));
        }
        out
    }

    /// Tokens of the reasoning block so far.
    pub fn reasoning_tokens(&self) -> usize {
        self.reasoning
            .as_ref()
            .map_or(0, ReasoningSplitter::reasoning_tokens)
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
            }
        }
        out
    }
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
        let mut splitter = reasoning.map(ReasoningSplitter::new);
        let (mut thought, mut answer) = (String::new(), String::new());
        let texts = tokens.iter().map(|t| t.text.as_str()).chain([tail]);
        for text in texts {
            let pieces = match &mut splitter {
                Some(s) => s.push(text),
                None => vec![Piece::Content(text.to_string())],
            };
            collect(pieces, &mut thought, &mut answer);
        }
        if let Some(s) = &mut splitter {
            collect(s.finish(), &mut thought, &mut answer);
        }
        let (content, calls) = match tools {
            None => (Some(answer), Vec::new()),
            Some(mode) => tool_reply::split(mode, &answer),
        };
        let has_reasoning = splitter.is_some() && !thought.is_empty();
        Reply {
            content: content.filter(|c| !(has_reasoning && c.is_empty())),
            reasoning: has_reasoning.then_some(thought),
            calls,
            reasoning_tokens: splitter.map_or(0, |s| s.reasoning_tokens()),
        }
    }
}

fn collect(pieces: Vec<Piece>, thought: &mut String, answer: &mut String) {
    for p in pieces {
        match p {
            Piece::Reasoning(t) => thought.push_str(&t),
            Piece::Content(t) => answer.push_str(&t),
        }
    }
}
