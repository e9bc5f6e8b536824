//! The items of a Responses `input` list, as clients send them (data only). An item without a
//! `type` is a message, as OpenAI's SDKs allow (`{"role": "user", "content": "Hi"}`).
//! [`crate::validation::responses`] turns them into chat turns.

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

/// `input`: one user message as text, or a list of items.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ResponseInput {
    Text(String),
    /// Items in conversation order; each is read as an [`InputItem`] (an item that does not
    /// parse is a 400 naming its index).
    #[schema(value_type = Vec<InputItem>)]
    Items(Vec<Value>),
}

/// One input item.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputItem {
    /// A message of `user`, `system`, `developer` or `assistant`.
    Message(MessageItem),
    /// A call the model made earlier.
    FunctionCall(FunctionCallItem),
    /// The result of a call, which the client ran.
    FunctionCallOutput(FunctionCallOutputItem),
    /// Reasoning the model wrote earlier: accepted, and left out of the prompt (chat templates
    /// drop earlier turns' reasoning).
    Reasoning(ReasoningItem),
}

/// A message item.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct MessageItem {
    /// `user`, `system`, `developer` (read as `system`) or `assistant`.
    pub role: String,
    pub content: InputContent,
    /// Accepted and ignored (set on items copied from an earlier output).
    pub id: Option<String>,
    /// Accepted and ignored.
    pub status: Option<String>,
}

/// A message's content, or what a call returned: text, or a list of parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum InputContent {
    Text(String),
    Parts(Vec<InputContentPart>),
}

/// One part of a message's (or a call output's) content. Only text parts (`input_text`,
/// `output_text`, `refusal`) are supported; `input_image`, `input_file` and `input_audio` are
/// refused with a 400 naming the part type.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct InputContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of an `input_text` or `output_text` part.
    pub text: Option<String>,
    /// The text of a `refusal` part.
    pub refusal: Option<String>,
}

/// A `function_call` item.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FunctionCallItem {
    /// The id that the matching `function_call_output` names.
    pub call_id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
    /// Accepted and ignored (function names are unique across namespaces).
    pub namespace: Option<String>,
    /// Accepted and ignored.
    pub id: Option<String>,
    /// Accepted and ignored.
    pub status: Option<String>,
}

/// A `function_call_output` item.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FunctionCallOutputItem {
    pub call_id: String,
    pub output: InputContent,
    /// Accepted and ignored.
    pub id: Option<String>,
    /// Accepted and ignored.
    pub status: Option<String>,
}

/// A `reasoning` item (its text is not put back into the prompt).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ReasoningItem {
    pub id: Option<String>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub summary: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub content: Option<Vec<Value>>,
    pub encrypted_content: Option<String>,
}

impl InputItem {
    /// Item `value` of an input list; an object without `type` but with `role` is a message.
    pub fn parse(mut value: Value) -> Result<InputItem, serde_json::Error> {
        if let Some(map) = value.as_object_mut() {
            if !map.contains_key("type") && map.contains_key("role") {
                map.insert("type".into(), Value::String("message".into()));
            }
        }
        serde_json::from_value(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_may_omit_their_type_and_unknown_types_are_named() {
        let item = InputItem::parse(json!({"role": "user", "content": "hi"})).unwrap();
        assert!(matches!(item, InputItem::Message(m) if m.role == "user"));
        let call = json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"});
        assert!(matches!(
            InputItem::parse(call).unwrap(),
            InputItem::FunctionCall(_)
        ));
        let err = InputItem::parse(json!({"type": "custom_tool_call", "input": "x"})).unwrap_err();
        assert!(err.to_string().contains("custom_tool_call"), "{err}");
    }
}
