//! [`MessagesEncoder`]: a streamed reply as Anthropic's named server-sent events. The reply is
//! read by a [`ReplyReader`] (as chat completions reads it), and each piece goes into a content
//! block, opened when its kind changes:
//!
//! ```text
//! message_start (message, empty content, usage.input_tokens = the prompt)
//!   ping ... (every 5 s while nothing else is sent)
//!   content_block_start thinking ─ content_block_delta thinking_delta × n ─ content_block_stop
//!   content_block_start text ───── content_block_delta text_delta × n ───── content_block_stop
//!   content_block_start tool_use ─ content_block_delta input_json_delta ─── content_block_stop
//! message_delta (stop_reason, stop_sequence, usage: output, input and cache-read tokens)
//! message_stop
//! ```
//!
//! A failure after the start is an `error` event (Anthropic's error body), and the stream ends
//! there. Calls arrive whole (see [`crate::tools`]), so each `tool_use` block carries its input
//! in one `input_json_delta`. `message_start` cannot know the prefix-cache hits yet, so its
//! `input_tokens` is the whole prompt; `message_delta` carries the final split.

use kestrel_engine::api::{EngineEvent, Usage};
use kestrel_engine::request::FinishReason;
use serde_json::{json, Value};

use super::error::AnthropicError;
use super::message::{self, MessageContext};
use super::stop::StopSequences;
use super::wire::OutputBlock;
use crate::error::ApiError;
use crate::reply_reader::{ReplyEvent, ReplyReader};
use crate::request_log::Tally;
use crate::sse::{json, SseEncoder, SseFrame};

/// The kind of the open text-like block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
}

/// Encodes one streamed reply.
pub struct MessagesEncoder {
    cx: MessageContext,
    reader: ReplyReader,
    stop: StopSequences,
    /// The open block, if any, and how many blocks were opened.
    open: Option<Open>,
    blocks: usize,
    calls: usize,
    /// `message_stop` or an `error` went out.
    ended: bool,
}

impl MessagesEncoder {
    pub fn new(cx: MessageContext) -> Self {
        MessagesEncoder {
            reader: ReplyReader::new(cx.reasoning, cx.tools.as_ref()),
            stop: StopSequences::new(&cx.stops),
            cx,
            open: None,
            blocks: 0,
            calls: 0,
            ended: false,
        }
    }

    /// Frames for what the reader made of the next piece of text.
    fn send(&mut self, events: Vec<ReplyEvent>, out: &mut Vec<SseFrame>) {
        for event in events {
            match event {
                ReplyEvent::Reasoning(t) => {
                    self.open_block(Open::Thinking, out);
                    self.delta(json!({"type": "thinking_delta", "thinking": t}), out);
                }
                ReplyEvent::Content(t) if t.is_empty() => {}
                ReplyEvent::Content(t) => {
                    self.open_block(Open::Text, out);
                    self.delta(json!({"type": "text_delta", "text": t}), out);
                }
                ReplyEvent::Call { call, .. } => {
                    self.close(out);
                    self.calls += 1;
                    let OutputBlock::ToolUse { id, name, input } = message::tool_use(call) else {
                        continue;
                    };
                    let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                    self.start_block(block, out);
                    let partial =
                        json!({"type": "input_json_delta", "partial_json": input.to_string()});
                    self.delta(partial, out);
                    self.close_index(self.blocks - 1, out);
                }
            }
        }
    }

    /// Opens a block of `kind` unless one is open.
    fn open_block(&mut self, kind: Open, out: &mut Vec<SseFrame>) {
        if self.open == Some(kind) {
            return;
        }
        self.close(out);
        let block = match kind {
            Open::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Open::Text => json!({"type": "text", "text": ""}),
        };
        self.start_block(block, out);
        self.open = Some(kind);
    }

    fn start_block(&mut self, block: Value, out: &mut Vec<SseFrame>) {
        let index = self.blocks;
        self.blocks += 1;
        let event = json!({"type": "content_block_start", "index": index, "content_block": block});
        out.push(SseFrame::named("content_block_start", json(&event)));
    }

    fn delta(&self, delta: Value, out: &mut Vec<SseFrame>) {
        let index = self.blocks.saturating_sub(1);
        let event = json!({"type": "content_block_delta", "index": index, "delta": delta});
        out.push(SseFrame::named("content_block_delta", json(&event)));
    }

    /// Closes the open text-like block, if any.
    fn close(&mut self, out: &mut Vec<SseFrame>) {
        if self.open.take().is_some() {
            self.close_index(self.blocks - 1, out);
        }
    }

    fn close_index(&self, index: usize, out: &mut Vec<SseFrame>) {
        let event = json!({"type": "content_block_stop", "index": index});
        out.push(SseFrame::named("content_block_stop", json(&event)));
    }

    /// The rest of the reply, `message_delta` and `message_stop`.
    fn finish(&mut self, reason: FinishReason, tail: &str, usage: Usage) -> Vec<SseFrame> {
        let mut out = Vec::new();
        let tail = self.stop.cut(tail).to_string();
        let mut events = self.reader.push(&tail);
        events.extend(self.reader.finish());
        self.send(events, &mut out);
        self.close(&mut out);
        let stop_sequence = self.stop.matched();
        let stop_reason = message::stop_reason(reason, self.calls > 0, stop_sequence);
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": message::usage(usage),
        });
        out.push(SseFrame::named("message_delta", json(&delta)));
        out.push(SseFrame::named(
            "message_stop",
            json(&json!({"type": "message_stop"})),
        ));
        self.ended = true;
        out
    }

    /// An `error` event; the stream ends with it.
    fn error(&mut self, e: ApiError) -> Vec<SseFrame> {
        self.ended = true;
        vec![SseFrame::named("error", json(&AnthropicError(e).body()))]
    }
}

impl SseEncoder for MessagesEncoder {
    fn start(&mut self) -> Vec<SseFrame> {
        let event = json!({"type": "message_start", "message": self.cx.start()});
        vec![SseFrame::named("message_start", json(&event))]
    }

    fn event(&mut self, index: usize, event: EngineEvent) -> Vec<SseFrame> {
        if index != 0 || self.ended {
            return Vec::new();
        }
        match event {
            EngineEvent::Token(t) => {
                let mut out = Vec::new();
                let events = self.reader.push(self.stop.cut(&t.text));
                self.send(events, &mut out);
                out
            }
            EngineEvent::Finished {
                reason,
                text,
                usage,
                ..
            } => self.finish(reason, &text, usage),
            EngineEvent::Failed(f) => self.error(f.into()),
        }
    }

    fn end(&mut self, _tally: &Tally) -> Vec<SseFrame> {
        if self.ended {
            return Vec::new();
        }
        self.error(ApiError::Internal(
            "the engine ended the request without a result".into(),
        ))
    }

    fn keepalive(&mut self) -> Option<SseFrame> {
        Some(SseFrame::named("ping", json(&json!({"type": "ping"}))))
    }
}

#[cfg(test)]
mod tests {
    use kestrel_engine::api::{EngineFailure, RequestTimings, TokenEvent};

    use super::*;

    fn encoder() -> MessagesEncoder {
        MessagesEncoder::new(MessageContext {
            id: "msg_1".into(),
            model: "m".into(),
            stops: vec!["##".into()],
            reasoning: None,
            tools: None,
            prompt_tokens: 7,
        })
    }

    fn token(text: &str) -> EngineEvent {
        EngineEvent::Token(TokenEvent {
            id: 1,
            text: text.into(),
            logprobs: None,
        })
    }

    fn data(frames: &[SseFrame]) -> Vec<(&'static str, Value)> {
        frames
            .iter()
            .map(|f| (f.event.unwrap(), serde_json::from_str(&f.data).unwrap()))
            .collect()
    }

    #[test]
    fn a_reply_streams_as_one_text_block_and_names_its_stop_sequence() {
        let mut e = encoder();
        let start = data(&e.start());
        assert_eq!(start[0].0, "message_start");
        assert_eq!(start[0].1["message"]["usage"]["input_tokens"], 7);
        let mut frames = e.event(0, token("Hel"));
        frames.extend(e.event(0, token("lo##")));
        frames.extend(e.event(
            0,
            EngineEvent::Finished {
                reason: FinishReason::Stop,
                text: String::new(),
                usage: Usage {
                    prompt_tokens: 7,
                    completion_tokens: 2,
                    cached_tokens: 3,
                },
                timings: RequestTimings::default(),
            },
        ));
        let events = data(&frames);
        let names: Vec<&str> = events.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[2].1["delta"]["text"], "lo");
        let delta = &events[4].1;
        assert_eq!(delta["delta"]["stop_reason"], "stop_sequence");
        assert_eq!(delta["delta"]["stop_sequence"], "##");
        assert_eq!(delta["usage"]["input_tokens"], 4);
        assert_eq!(delta["usage"]["cache_read_input_tokens"], 3);
        assert!(e.end(&Tally::new("/v1/messages", 7, 1)).is_empty());
    }

    #[test]
    fn a_failure_is_an_error_event_and_idle_streams_ping() {
        let mut e = encoder();
        assert_eq!(e.keepalive().and_then(|f| f.event), Some("ping"));
        let failed = EngineEvent::Failed(EngineFailure::Internal("boom".into()));
        let events = data(&e.event(0, failed));
        assert_eq!(events[0].0, "error");
        assert_eq!(events[0].1["error"]["type"], "api_error");
        assert!(
            e.event(0, token("late")).is_empty(),
            "nothing after the error"
        );
    }
}
