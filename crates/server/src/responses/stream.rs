//! [`ResponsesEncoder`]: a reply streamed as the Responses API's semantic events.
//!
//! ```text
//! start ─► response.created, response.in_progress
//! tokens ─► ReplyReader ─► Reasoning ─► [output_item.added, content_part.added] reasoning_text.delta…
//!                       ├► Content  ─► [item done] [output_item.added, content_part.added] output_text.delta…
//!                       └► Call     ─► [item done] output_item.added, function_call_arguments.delta/.done,
//!                                      output_item.done
//! finish ─► the open item's *.done, content_part.done, output_item.done
//! end ─► response.completed | response.incomplete | (error, response.failed)
//! ```
//!
//! Items follow the rule of [`super::output`]: whitespace before the answer is held back
//! until text follows, so a reply that is only calls has no message item, as when whole.

use kestrel_engine::api::EngineEvent;
use kestrel_engine::request::FinishReason;

use super::events::{Part, ResponseEvent, Sequenced};
use super::output::{item_id, item_status, message_item, reasoning_item, ResponseContext};
use super::wire::{OutputItem, OutputText, ReasoningText};
use crate::error::ApiError;
use crate::reply_reader::{ReplyEvent, ReplyReader};
use crate::request_log::Tally;
use crate::sse::{json, SseEncoder, SseFrame};

/// The item being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
}

struct Open {
    kind: Kind,
    id: String,
    text: String,
}

/// Encodes one response's stream.
pub struct ResponsesEncoder {
    cx: ResponseContext,
    reader: ReplyReader,
    next_seq: u64,
    /// Finished items, in output order.
    items: Vec<OutputItem>,
    open: Option<Open>,
    /// Answer text that is only whitespace so far, held back until text follows.
    held: String,
    finish: Option<FinishReason>,
    failure: Option<String>,
}

impl ResponsesEncoder {
    /// An encoder for the response `cx` describes.
    pub fn new(cx: ResponseContext) -> Self {
        ResponsesEncoder {
            reader: ReplyReader::new(cx.reasoning, cx.tools.as_ref()),
            cx,
            next_seq: 0,
            items: Vec::new(),
            open: None,
            held: String::new(),
            finish: None,
            failure: None,
        }
    }

    fn frame(&mut self, event: ResponseEvent) -> SseFrame {
        let seq = self.next_seq;
        self.next_seq += 1;
        let data = json(&Sequenced {
            event: &event,
            sequence_number: seq,
        });
        SseFrame::named(event.name(), data)
    }

    fn emit(&mut self, events: Vec<ResponseEvent>, out: &mut Vec<SseFrame>) {
        for event in events {
            let frame = self.frame(event);
            out.push(frame);
        }
    }

    fn read(&mut self, events: Vec<ReplyEvent>, out: &mut Vec<SseFrame>) {
        for event in events {
            let events = match event {
                ReplyEvent::Reasoning(text) => self.reasoning(text),
                ReplyEvent::Content(text) => self.content(text),
                ReplyEvent::Call { call, .. } => {
                    let mut events = self.close("completed");
                    self.held.clear();
                    let item = self.cx.call_item(call);
                    events.extend(self.call(item));
                    events
                }
            };
            self.emit(events, out);
        }
    }

    fn reasoning(&mut self, text: String) -> Vec<ResponseEvent> {
        let mut events = Vec::new();
        if text.is_empty() {
            return events;
        }
        if self.open.as_ref().map(|o| o.kind) != Some(Kind::Reasoning) {
            events.extend(self.close("completed"));
            events.extend(self.open_item(Kind::Reasoning));
        }
        events.extend(self.delta(text));
        events
    }

    fn content(&mut self, text: String) -> Vec<ResponseEvent> {
        if self.open.as_ref().map(|o| o.kind) == Some(Kind::Message) {
            return self.delta(text);
        }
        self.held.push_str(&text);
        if self.held.trim().is_empty() {
            return Vec::new();
        }
        let mut events = self.close("completed");
        events.extend(self.open_item(Kind::Message));
        let held = std::mem::take(&mut self.held);
        events.extend(self.delta(held));
        events
    }

    /// Opens a reasoning or message item: `output_item.added` and `content_part.added`.
    fn open_item(&mut self, kind: Kind) -> Vec<ResponseEvent> {
        let prefix = match kind {
            Kind::Reasoning => "rs",
            Kind::Message => "msg",
        };
        let open = Open {
            kind,
            id: item_id(prefix),
            text: String::new(),
        };
        let output_index = self.items.len();
        let (mut item, part) = shape(&open, "in_progress");
        match &mut item {
            OutputItem::Message { content, .. } => content.clear(),
            OutputItem::Reasoning { content, .. } => content.clear(),
            OutputItem::FunctionCall { .. } => {}
        }
        let events = vec![
            ResponseEvent::OutputItemAdded { output_index, item },
            ResponseEvent::ContentPartAdded {
                item_id: open.id.clone(),
                output_index,
                content_index: 0,
                part,
            },
        ];
        self.open = Some(open);
        events
    }

    /// More text of the open item.
    fn delta(&mut self, delta: String) -> Vec<ResponseEvent> {
        let output_index = self.items.len();
        let Some(open) = &mut self.open else {
            return Vec::new();
        };
        if delta.is_empty() {
            return Vec::new();
        }
        open.text.push_str(&delta);
        let item_id = open.id.clone();
        let event = match open.kind {
            Kind::Reasoning => ResponseEvent::ReasoningTextDelta {
                item_id,
                output_index,
                content_index: 0,
                delta,
            },
            Kind::Message => ResponseEvent::OutputTextDelta {
                item_id,
                output_index,
                content_index: 0,
                delta,
                logprobs: Vec::new(),
            },
        };
        vec![event]
    }

    /// Ends the open item, if any, with `status`.
    fn close(&mut self, status: &'static str) -> Vec<ResponseEvent> {
        let Some(open) = self.open.take() else {
            return Vec::new();
        };
        let output_index = self.items.len();
        let (item, part) = shape(&open, status);
        let (item_id, text) = (open.id, open.text);
        let done = match open.kind {
            Kind::Reasoning => ResponseEvent::ReasoningTextDone {
                item_id: item_id.clone(),
                output_index,
                content_index: 0,
                text,
            },
            Kind::Message => ResponseEvent::OutputTextDone {
                item_id: item_id.clone(),
                output_index,
                content_index: 0,
                text,
                logprobs: Vec::new(),
            },
        };
        self.items.push(item.clone());
        vec![
            done,
            ResponseEvent::ContentPartDone {
                item_id,
                output_index,
                content_index: 0,
                part,
            },
            ResponseEvent::OutputItemDone { output_index, item },
        ]
    }

    /// A whole call: added, its arguments in one delta, done.
    fn call(&mut self, item: OutputItem) -> Vec<ResponseEvent> {
        let OutputItem::FunctionCall {
            id,
            call_id,
            name,
            arguments,
            namespace,
            ..
        } = item.clone()
        else {
            return Vec::new();
        };
        let output_index = self.items.len();
        let added = OutputItem::FunctionCall {
            id: id.clone(),
            call_id,
            name: name.clone(),
            arguments: String::new(),
            namespace,
            status: "in_progress",
        };
        self.items.push(item.clone());
        vec![
            ResponseEvent::OutputItemAdded {
                output_index,
                item: added,
            },
            ResponseEvent::FunctionCallArgumentsDelta {
                item_id: id.clone(),
                output_index,
                delta: arguments.clone(),
            },
            ResponseEvent::FunctionCallArgumentsDone {
                item_id: id,
                output_index,
                name,
                arguments,
            },
            ResponseEvent::OutputItemDone { output_index, item },
        ]
    }

    /// The end of the reply: the open item ends; a reply with no item gets an (empty or
    /// whitespace) message, as when whole.
    fn finished(&mut self, reason: FinishReason) -> Vec<ResponseEvent> {
        self.finish = Some(reason);
        let status = item_status(true, reason);
        let mut events = self.close(status);
        if self.items.is_empty() {
            events.extend(self.open_item(Kind::Message));
            let held = std::mem::take(&mut self.held);
            events.extend(self.delta(held));
            events.extend(self.close(status));
        }
        events
    }

    /// The final event: the response as it ended (kept in the store when asked).
    fn last(&mut self, tally: &Tally) -> ResponseEvent {
        let items = std::mem::take(&mut self.items);
        let response = match (self.failure.take(), self.finish) {
            (Some(message), _) => self.cx.failed(items, message),
            (None, Some(reason)) => {
                let reasoning_tokens = self.reader.reasoning_tokens();
                self.cx
                    .finished(items, reason, tally.usage(), reasoning_tokens)
            }
            (None, None) => self.cx.failed(
                items,
                "the engine ended the request without a result".into(),
            ),
        };
        self.cx.remember(&response);
        match response.status {
            "completed" => ResponseEvent::Completed { response },
            "incomplete" => ResponseEvent::Incomplete { response },
            _ => ResponseEvent::Failed { response },
        }
    }
}

/// The item `open` makes with `status`, and its content part.
fn shape(open: &Open, status: &'static str) -> (OutputItem, Part) {
    match open.kind {
        Kind::Reasoning => {
            let part = ReasoningText {
                kind: "reasoning_text",
                text: open.text.clone(),
            };
            let item = reasoning_item(open.id.clone(), open.text.clone(), status);
            (item, Part::Reasoning(part))
        }
        Kind::Message => {
            let item = message_item(open.id.clone(), open.text.clone(), status);
            (item, Part::Text(OutputText::new(open.text.clone())))
        }
    }
}

impl SseEncoder for ResponsesEncoder {
    fn start(&mut self) -> Vec<SseFrame> {
        let created = self.cx.response("in_progress", Vec::new(), None);
        let events = vec![
            ResponseEvent::Created {
                response: created.clone(),
            },
            ResponseEvent::InProgress { response: created },
        ];
        let mut out = Vec::new();
        self.emit(events, &mut out);
        out
    }

    fn event(&mut self, _index: usize, event: EngineEvent) -> Vec<SseFrame> {
        let mut out = Vec::new();
        match event {
            EngineEvent::Token(t) => {
                let events = self.reader.push(&t.text);
                self.read(events, &mut out);
            }
            EngineEvent::Finished { reason, text, .. } => {
                let mut events = self.reader.push(&text);
                events.extend(self.reader.finish());
                self.read(events, &mut out);
                let events = self.finished(reason);
                self.emit(events, &mut out);
            }
            EngineEvent::Failed(f) => {
                let error = ApiError::from(f);
                let body = error.openai_body();
                self.failure = Some(body.error.message.clone());
                let event = ResponseEvent::Error {
                    code: body.error.kind,
                    message: body.error.message,
                    param: body.error.param,
                };
                self.emit(vec![event], &mut out);
            }
        }
        out
    }

    fn end(&mut self, tally: &Tally) -> Vec<SseFrame> {
        let last = self.last(tally);
        vec![self.frame(last)]
    }
}
