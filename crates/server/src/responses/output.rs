//! [`ResponseContext`]: what a response's every shape (whole, each streamed event, stored)
//! shares, and how a finished reply becomes output items, the final [`ResponseObject`], and
//! the assistant turn kept in the [`ResponseStore`].
//!
//! Whole and streamed replies follow one rule for their items, so the two agree: a
//! `reasoning` item when the reply reasoned, a `message` when it has text that is not only
//! whitespace (or when there would be no item at all), then one `function_call` per call.

use std::collections::HashMap;
use std::sync::Arc;

use kestrel_engine::api::Usage;
use kestrel_engine::request::FinishReason;
use kestrel_model::chat_template::ChatMessage;
use serde_json::{json, Value};

use super::store::{ResponseStore, StoredResponse};
use super::wire::{
    IncompleteDetails, InputTokensDetails, OutputItem, OutputText, OutputTokensDetails,
    ReasoningText, ResponseError, ResponseObject, ResponseSettings, ResponseUsage,
};
use crate::reasoning::ReasoningMode;
use crate::reply_reader::Reply;
use crate::response_id::random_hex128;
use crate::tools::ToolCall;
use crate::validation::chat_tools::ToolMode;

/// A fresh item or response id: `prefix`, an underscore, 128 random bits in hex.
pub fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_hex128())
}

/// Where a response is kept once finished.
pub struct Keep {
    pub store: Arc<ResponseStore>,
    /// The turns that led to the response (its `instructions` left out).
    pub conversation: Vec<ChatMessage>,
}

/// What every shape of one response shares.
pub struct ResponseContext {
    /// `resp_<hex>`.
    pub id: String,
    pub created_at: u64,
    pub model: String,
    /// The request's settings, echoed.
    pub settings: ResponseSettings,
    /// How the reply is read for function calls; `None`: plain text.
    pub tools: Option<ToolMode>,
    /// Where the reply starts when its reasoning is split out; `None`: not split.
    pub reasoning: Option<ReasoningMode>,
    /// Where to keep the finished response (`None`: `store: false`).
    pub keep: Option<Keep>,
    /// The namespace of each function offered inside a `namespace` tool, by name.
    pub namespaces: HashMap<String, String>,
}

impl ResponseContext {
    /// The response with `status`, `output` and `usage`.
    pub fn response(
        &self,
        status: &'static str,
        output: Vec<OutputItem>,
        usage: Option<ResponseUsage>,
    ) -> ResponseObject {
        ResponseObject {
            id: self.id.clone(),
            object: "response",
            created_at: self.created_at,
            status,
            incomplete_details: None,
            error: None,
            model: self.model.clone(),
            output,
            usage,
            settings: self.settings.clone(),
        }
    }

    /// The response ended for `reason` with `output`.
    pub fn finished(
        &self,
        output: Vec<OutputItem>,
        reason: FinishReason,
        usage: Usage,
        reasoning_tokens: usize,
    ) -> ResponseObject {
        let usage = Some(response_usage(usage, reasoning_tokens));
        match reason {
            FinishReason::Stop => self.response("completed", output, usage),
            FinishReason::Length => ResponseObject {
                incomplete_details: Some(IncompleteDetails {
                    reason: "max_output_tokens",
                }),
                ..self.response("incomplete", output, usage)
            },
            FinishReason::Abort | FinishReason::Error => {
                self.failed(output, "the request was aborted before it finished".into())
            }
        }
    }

    /// A failed response.
    pub fn failed(&self, output: Vec<OutputItem>, message: String) -> ResponseObject {
        ResponseObject {
            error: Some(ResponseError {
                code: "server_error",
                message,
            }),
            ..self.response("failed", output, None)
        }
    }

    /// The output items of a whole reply that ended for `reason`.
    pub fn reply_items(&self, reply: Reply, reason: FinishReason) -> Vec<OutputItem> {
        let mut items = Vec::new();
        let text = reply.content.unwrap_or_default();
        let message =
            !text.trim().is_empty() || (reply.calls.is_empty() && reply.reasoning.is_none());
        if let Some(thought) = reply.reasoning {
            let last = !message && reply.calls.is_empty();
            items.push(reasoning_item(
                item_id("rs"),
                thought,
                item_status(last, reason),
            ));
        }
        if message {
            items.push(message_item(
                item_id("msg"),
                text,
                item_status(reply.calls.is_empty(), reason),
            ));
        }
        items.extend(reply.calls.into_iter().map(|c| self.call_item(c)));
        items
    }

    /// The `function_call` item of `call` (naming its namespace, if it came in one).
    pub fn call_item(&self, call: ToolCall) -> OutputItem {
        OutputItem::FunctionCall {
            id: item_id("fc"),
            call_id: call.id,
            namespace: self.namespaces.get(&call.name).cloned(),
            name: call.name,
            arguments: call.arguments,
            status: "completed",
        }
    }

    /// Keeps a finished response (and its conversation) when the request asked to store it.
    pub fn remember(&self, response: &ResponseObject) {
        let Some(keep) = &self.keep else { return };
        if response.status == "failed" {
            return;
        }
        let mut conversation = keep.conversation.clone();
        conversation.push(assistant_turn(&response.output));
        keep.store.insert(StoredResponse {
            response: response.clone(),
            conversation,
        });
    }
}

/// `completed`, or `incomplete` for the last item of a reply cut short.
pub fn item_status(last: bool, reason: FinishReason) -> &'static str {
    match (last, reason) {
        (true, FinishReason::Length) => "incomplete",
        _ => "completed",
    }
}

/// A `reasoning` item.
pub fn reasoning_item(id: String, text: String, status: &'static str) -> OutputItem {
    OutputItem::Reasoning {
        id,
        summary: Vec::new(),
        content: vec![ReasoningText {
            kind: "reasoning_text",
            text,
        }],
        status,
    }
}

/// A `message` item of one `output_text` part.
pub fn message_item(id: String, text: String, status: &'static str) -> OutputItem {
    OutputItem::Message {
        id,
        role: "assistant",
        status,
        content: vec![OutputText::new(text)],
    }
}

/// Usage in the Responses shape.
pub fn response_usage(u: Usage, reasoning_tokens: usize) -> ResponseUsage {
    ResponseUsage {
        input_tokens: u.prompt_tokens,
        input_tokens_details: InputTokensDetails {
            cached_tokens: u.cached_tokens,
        },
        output_tokens: u.completion_tokens,
        output_tokens_details: OutputTokensDetails { reasoning_tokens },
        total_tokens: u.prompt_tokens + u.completion_tokens,
    }
}

/// The assistant turn the output items make, as the chat template sees it: the messages' text
/// and the calls (arguments as objects); reasoning is left out, as templates drop earlier
/// turns' reasoning.
pub fn assistant_turn(output: &[OutputItem]) -> ChatMessage {
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for item in output {
        match item {
            OutputItem::Message { content, .. } => {
                let t = text.get_or_insert_with(String::new);
                content.iter().for_each(|p| t.push_str(&p.text));
            }
            OutputItem::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => calls.push(template_call(call_id, name, arguments)),
            OutputItem::Reasoning { .. } => {}
        }
    }
    let content = match (text, calls.is_empty()) {
        (None, true) => Some(String::new()),
        (text, _) => text,
    };
    ChatMessage {
        role: "assistant".into(),
        content,
        tool_calls: (!calls.is_empty()).then_some(Value::Array(calls)),
        tool_call_id: None,
        name: None,
    }
}

/// One call as chat templates print it (`arguments` an object; kept as text if it is not
/// JSON).
pub fn template_call(call_id: &str, name: &str, arguments: &str) -> Value {
    let arguments = serde_json::from_str::<Value>(arguments)
        .unwrap_or_else(|_| Value::String(arguments.into()));
    json!({
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_assistant_turn_joins_text_and_calls() {
        let output = vec![
            reasoning_item("rs_1".into(), "hmm".into(), "completed"),
            message_item("msg_1".into(), "Sure.".into(), "completed"),
            OutputItem::FunctionCall {
                id: "fc_1".into(),
                call_id: "call_1".into(),
                name: "f".into(),
                arguments: r#"{"x":1}"#.into(),
                namespace: None,
                status: "completed",
            },
        ];
        let turn = assistant_turn(&output);
        assert_eq!(turn.content.as_deref(), Some("Sure."));
        let calls = turn.tool_calls.unwrap();
        assert_eq!(calls[0]["id"], "call_1");
        assert_eq!(calls[0]["function"]["arguments"]["x"], 1);
        let only_call = assistant_turn(&output[2..]);
        assert_eq!(only_call.content, None);
    }
}
