//! A chat reply read for tool calls: whole ([`split`]) or while it streams
//! ([`ToolReplyStream`]). Under `auto` the model's own call format is parsed; under a forced
//! choice the reply is the JSON the grammar produced.

use kestrel_engine::request::FinishReason;

use crate::tools::{forced, StreamEvent, ToolCall, ToolCallStream, ToolChoice};
use crate::validation::chat_tools::ToolMode;

/// The reply's text for the user and its calls.
pub fn split(mode: &ToolMode, text: &str) -> (Option<String>, Vec<ToolCall>) {
    match mode.choice {
        ToolChoice::Auto => {
            let parsed = mode.format.parse(text);
            (parsed.content, parsed.calls)
        }
        _ => match forced::parse(&mode.choice, text, mode.format) {
            Some(calls) => (None, calls),
            // Cut short (e.g. at max_tokens): the partial JSON stays visible as text.
            None => (Some(text.to_string()), Vec::new()),
        },
    }
}

/// `finish_reason` of a reply: `tool_calls` when it ended by itself with calls.
pub fn finish_reason(reason: FinishReason, has_calls: bool) -> String {
    match (reason, has_calls) {
        (FinishReason::Stop, true) => "tool_calls".to_string(),
        (reason, _) => reason.as_str().to_string(),
    }
}

/// One streamed choice's reply under a tool mode.
#[derive(Debug)]
pub enum ToolReplyStream {
    /// `auto`: text streams until the model's call marker; calls come at the end.
    Native(ToolCallStream),
    /// A forced call: the JSON is held and read at the end.
    Forced { mode: ToolMode, text: String },
}

impl ToolReplyStream {
    pub fn new(mode: &ToolMode) -> Self {
        match mode.choice {
            ToolChoice::Auto => ToolReplyStream::Native(ToolCallStream::new(mode.format)),
            _ => ToolReplyStream::Forced {
                mode: mode.clone(),
                text: String::new(),
            },
        }
    }

    /// The content that can be sent for the next piece of text.
    pub fn push(&mut self, piece: &str) -> Vec<StreamEvent> {
        match self {
            ToolReplyStream::Native(s) => s.push(piece),
            ToolReplyStream::Forced { text, .. } => {
                text.push_str(piece);
                Vec::new()
            }
        }
    }

    /// The rest: held-back text and the calls.
    pub fn finish(self) -> Vec<StreamEvent> {
        match self {
            ToolReplyStream::Native(s) => s.finish(),
            ToolReplyStream::Forced { mode, text } => {
                let (content, calls) = split(&mode, &text);
                let content = content.map(StreamEvent::Content);
                let calls = calls
                    .into_iter()
                    .enumerate()
                    .map(|(index, call)| StreamEvent::Call { index, call });
                content.into_iter().chain(calls).collect()
            }
        }
    }
}
