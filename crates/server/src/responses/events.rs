//! The semantic server-sent events of a streamed response (data only), each sent as
//! `event: <type>` with a JSON body carrying the same `type` and the stream's increasing
//! `sequence_number`.

use serde::Serialize;
use serde_json::Value;

use super::wire::{OutputItem, OutputText, ReasoningText, ResponseObject};

/// One event of a streamed response.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
pub enum ResponseEvent {
    #[serde(rename = "response.created")]
    Created { response: ResponseObject },
    #[serde(rename = "response.in_progress")]
    InProgress { response: ResponseObject },
    #[serde(rename = "response.completed")]
    Completed { response: ResponseObject },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: ResponseObject },
    #[serde(rename = "response.failed")]
    Failed { response: ResponseObject },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: Part,
    },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: Part,
    },
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
        /// Always empty.
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        /// Always empty.
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningTextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningTextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        item_id: String,
        output_index: usize,
        name: String,
        arguments: String,
    },
    /// The request failed (followed by `response.failed`).
    #[serde(rename = "error")]
    Error {
        /// The OpenAI error type (`internal_error`, `service_unavailable`, ...).
        code: String,
        message: String,
        param: Option<String>,
    },
}

/// A content part of a message or reasoning item.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Part {
    Text(OutputText),
    Reasoning(ReasoningText),
}

impl ResponseEvent {
    /// The event's `type`, which also names its SSE frame.
    pub fn name(&self) -> &'static str {
        match self {
            ResponseEvent::Created { .. } => "response.created",
            ResponseEvent::InProgress { .. } => "response.in_progress",
            ResponseEvent::Completed { .. } => "response.completed",
            ResponseEvent::Incomplete { .. } => "response.incomplete",
            ResponseEvent::Failed { .. } => "response.failed",
            ResponseEvent::OutputItemAdded { .. } => "response.output_item.added",
            ResponseEvent::OutputItemDone { .. } => "response.output_item.done",
            ResponseEvent::ContentPartAdded { .. } => "response.content_part.added",
            ResponseEvent::ContentPartDone { .. } => "response.content_part.done",
            ResponseEvent::OutputTextDelta { .. } => "response.output_text.delta",
            ResponseEvent::OutputTextDone { .. } => "response.output_text.done",
            ResponseEvent::ReasoningTextDelta { .. } => "response.reasoning_text.delta",
            ResponseEvent::ReasoningTextDone { .. } => "response.reasoning_text.done",
            ResponseEvent::FunctionCallArgumentsDelta { .. } => {
                "response.function_call_arguments.delta"
            }
            ResponseEvent::FunctionCallArgumentsDone { .. } => {
                "response.function_call_arguments.done"
            }
            ResponseEvent::Error { .. } => "error",
        }
    }
}

/// An event with its place in the stream.
#[derive(Debug, Clone, Serialize)]
pub struct Sequenced<'a> {
    #[serde(flatten)]
    pub event: &'a ResponseEvent,
    pub sequence_number: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_their_type_and_sequence_number() {
        let event = ResponseEvent::OutputTextDelta {
            item_id: "msg_1".into(),
            output_index: 0,
            content_index: 0,
            delta: "Hi".into(),
            logprobs: Vec::new(),
        };
        let body = serde_json::to_value(Sequenced {
            event: &event,
            sequence_number: 3,
        })
        .unwrap();
        assert_eq!(body["type"], event.name());
        assert_eq!(body["sequence_number"], 3);
        assert_eq!(body["delta"], "Hi");
    }
}
