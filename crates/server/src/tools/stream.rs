//! [`ToolCallStream`]: tool-call parsing while the completion streams. Text before the calls
//! streams as content as it arrives (holding back only what may be the start of a call
//! marker); the calls are parsed by the whole-output parser when generation ends, so a
//! streamed and a non-streamed response carry the same calls.

use super::call::ToolCall;
use super::format::ToolCallFormat;

const PYTHON_TAG: &str = "<|python_tag|>";

/// What the stream can send so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// More of the message's text.
    Content(String),
    /// A complete call, the `index`-th of the message.
    Call { index: usize, call: ToolCall },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Llama 3 JSON: only blank text so far; a call would start with `{` or `<|python_tag|>`.
    Undecided,
    /// Streaming text, watching for the call marker.
    Content,
    /// Inside the calls: buffering until the end.
    Calls,
}

/// Splits streamed text into content deltas and calls.
#[derive(Debug, Clone)]
pub struct ToolCallStream {
    format: ToolCallFormat,
    text: String,
    /// Bytes of `text` already sent as content.
    sent: usize,
    mode: Mode,
}

impl ToolCallStream {
    pub fn new(format: ToolCallFormat) -> Self {
        let mode = match format.start_marker() {
            Some(_) => Mode::Content,
            None => Mode::Undecided,
        };
        ToolCallStream {
            format,
            text: String::new(),
            sent: 0,
            mode,
        }
    }

    /// Takes the next piece of generated text; returns the content that can be sent now.
    pub fn push(&mut self, delta: &str) -> Vec<StreamEvent> {
        self.text.push_str(delta);
        if self.mode == Mode::Undecided {
            self.decide();
        }
        if self.mode != Mode::Content {
            return Vec::new();
        }
        let until = match self.format.start_marker() {
            Some(marker) => self.content_end(marker),
            None => self.text.len(),
        };
        self.send_until(until).into_iter().collect()
    }

    /// Ends the stream: the held-back text and the calls.
    pub fn finish(mut self) -> Vec<StreamEvent> {
        if self.mode != Mode::Calls {
            return self.send_until(self.text.len()).into_iter().collect();
        }
        let parsed = self.format.parse(&self.text);
        if parsed.calls.is_empty() {
            return self.send_until(self.text.len()).into_iter().collect();
        }
        let mut events = Vec::new();
        let content = parsed.content.unwrap_or_default();
        let sent = &self.text[..self.sent];
        if content.len() > sent.len() && content.starts_with(sent) {
            events.push(StreamEvent::Content(content[sent.len()..].to_string()));
        }
        events.extend(
            parsed
                .calls
                .into_iter()
                .enumerate()
                .map(|(index, call)| StreamEvent::Call { index, call }),
        );
        events
    }

    /// Llama 3 JSON: calls when the first non-blank text opens an object or the python tag.
    fn decide(&mut self) {
        let t = self.text.trim_start();
        if t.is_empty() || (PYTHON_TAG.starts_with(t) && t.len() < PYTHON_TAG.len()) {
            return;
        }
        self.mode = if t.starts_with('{') || t.starts_with(PYTHON_TAG) {
            Mode::Calls
        } else {
            Mode::Content
        };
    }

    /// How far content may be sent: up to the marker once seen (then calls begin), else up to
    /// the longest tail that could still grow into the marker.
    fn content_end(&mut self, marker: &str) -> usize {
        if let Some(pos) = self.text[self.sent..].find(marker) {
            self.mode = Mode::Calls;
            return self.sent + pos;
        }
        let held = (1..marker.len())
            .rev()
            .find(|&n| self.text.ends_with(&marker[..n]))
            .unwrap_or(0);
        self.text.len() - held
    }

    fn send_until(&mut self, end: usize) -> Option<StreamEvent> {
        if end <= self.sent {
            return None;
        }
        let piece = self.text[self.sent..end].to_string();
        self.sent = end;
        Some(StreamEvent::Content(piece))
    }
}
