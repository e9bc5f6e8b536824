//! Forced calls: when `tool_choice` is `required` or names a function, the completion is
//! constrained to a JSON schema, so its arguments always parse, and the calls are read from
//! that JSON rather than from the model's own call format (as vLLM does).

use serde_json::{json, Value};

use super::call::ToolCall;
use super::choice::{FunctionSpec, ToolChoice};
use super::format::ToolCallFormat;

/// The schema the completion must follow for `choice`; `None` when nothing is forced.
/// `required` asks for a non-empty array of `{"name", "parameters"}` objects (at most one
/// without `parallel_tool_calls`); a named function asks for its arguments object.
pub fn schema(choice: &ToolChoice, functions: &[FunctionSpec], parallel: bool) -> Option<Value> {
    match choice {
        ToolChoice::None | ToolChoice::Auto => None,
        ToolChoice::Named(name) => functions
            .iter()
            .find(|f| &f.name == name)
            .map(|f| f.parameters.clone()),
        ToolChoice::Required => {
            let variants: Vec<Value> = functions
                .iter()
                .map(|f| {
                    json!({
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "enum": [f.name]},
                            "parameters": f.parameters,
                        },
                        "required": ["name", "parameters"],
                        // The wrapper is ours: a key beside the two would only be text the
                        // model could go on generating.
                        "additionalProperties": false,
                    })
                })
                .collect();
            let mut array = json!({"type": "array", "minItems": 1, "items": {"anyOf": variants}});
            if !parallel {
                array["maxItems"] = json!(1);
            }
            Some(array)
        }
    }
}

/// The calls in a forced completion's JSON; `None` if the text is not what the schema
/// produces (generation stopped early, for example at `max_tokens`).
pub fn parse(choice: &ToolChoice, text: &str, format: ToolCallFormat) -> Option<Vec<ToolCall>> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    match choice {
        ToolChoice::None | ToolChoice::Auto => None,
        ToolChoice::Named(name) => value
            .is_object()
            .then(|| vec![ToolCall::new(name.clone(), &value, format.new_call_id())]),
        ToolChoice::Required => {
            let Value::Array(items) = value else {
                return None;
            };
            items
                .into_iter()
                .map(|item| {
                    let name = item.get("name")?.as_str()?.to_string();
                    let args = item.get("parameters").filter(|a| a.is_object())?;
                    Some(ToolCall::new(name, args, format.new_call_id()))
                })
                .collect()
        }
    }
}
