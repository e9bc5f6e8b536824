//! OpenAI Responses -> [`ChatCall`]: the stored conversation `previous_response_id` continues,
//! then the request's input items, become chat turns (after `instructions` as the system
//! turn); function tools and `tool_choice` take OpenAI's chat shape; `text.format` becomes the
//! structured-output constraint. [`chat_call::validate`] does the rest, as for every chat API.
//!
//! | Input item | Chat turn |
//! |---|---|
//! | `message` (`user`, `system`, `assistant`; `developer` as `system`) | that role's turn (text parts joined) |
//! | `function_call` | a call on the assistant turn before it (or a new assistant turn) |
//! | `function_call_output` | a `tool` turn naming the call's id and function |
//! | `reasoning` | none (templates drop earlier turns' reasoning) |
//!
//! Errors name `input` (with the item's index), `tools`, `tool_choice` or `text.format`.

use std::collections::HashMap;
use std::time::Instant;

use kestrel_model::chat_template::ChatMessage;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::openai::wire::SamplingFields;
use crate::responses::items::{
    FunctionCallItem, FunctionCallOutputItem, InputContent, InputContentPart, InputItem,
    ResponseInput,
};
use crate::responses::wire::{ResponsesRequest, TextFormat};
use crate::state::AppState;
use crate::wire::structured::{JsonSchemaFormat, ResponseFormat, StructuredFields};

use super::chat_call::{self, ChatCall, MaxTokens};
use super::chat_tools::AutoWithoutFormat;
use super::{ValidRequest, Validate};

/// A Responses request and the conversation it continues.
#[derive(Debug, Clone)]
pub struct ResponsesCall {
    pub request: ResponsesRequest,
    /// The turns of the `previous_response_id` response (empty without one).
    pub history: Vec<ChatMessage>,
}

/// A validated Responses request.
#[derive(Debug, Clone)]
pub struct ValidResponses {
    pub valid: ValidRequest,
    /// The history and this request's input as turns (`instructions` left out): what a
    /// stored response keeps before its own output.
    pub conversation: Vec<ChatMessage>,
    /// The namespace of each function offered inside a `namespace` tool, by function name.
    pub namespaces: HashMap<String, String>,
}

impl Validate for ResponsesCall {
    type Valid = ValidResponses;
    fn validate(self, state: &AppState, arrival: Instant) -> Result<ValidResponses, ApiError> {
        responses(state, self, arrival)
    }
}

/// Validates `POST /v1/responses`.
pub fn responses(
    state: &AppState,
    call: ResponsesCall,
    arrival: Instant,
) -> Result<ValidResponses, ApiError> {
    let ResponsesCall {
        mut request,
        history,
    } = call;
    unsupported(&request)?;
    let input = request.input.take().ok_or_else(|| {
        ApiError::param("input", "`input` is required: a string or a list of items")
    })?;
    let conversation = conversation(history, input)?;
    let turns = rendered_turns(request.instructions.take(), &conversation);
    let Functions { tools, namespaces } = function_tools(request.tools.take().unwrap_or_default())?;
    let tool_choice = tool_choice(request.tool_choice.take(), tools.is_empty())?;
    let call = ChatCall {
        model: request.model.take(),
        turns,
        tools: Some(tools),
        tool_choice,
        parallel_tool_calls: request.parallel_tool_calls,
        auto_without_format: AutoWithoutFormat::ReadAsText,
        kwargs: None,
        sampling: SamplingFields {
            temperature: request.temperature,
            top_p: request.top_p,
            user: request.user.take(),
            ..SamplingFields::default()
        },
        structured: StructuredFields {
            response_format: text_format(request.text.take().and_then(|t| t.format)),
            guided_grammar: request.guided_grammar.take(),
            ..StructuredFields::default()
        },
        max_tokens: MaxTokens {
            requested: request.max_output_tokens,
            param: "max_output_tokens",
            clamp: false,
        },
        logprobs: None,
        prompt_logprobs: None,
        stream: request.stream.unwrap_or(false),
        include_usage: false,
    };
    let valid = chat_call::validate(state, call, arrival).map_err(renamed)?;
    Ok(ValidResponses {
        valid,
        conversation,
        namespaces,
    })
}

/// Refuses what Kestrel does not do: background responses, server-side conversations and
/// stored prompts.
fn unsupported(request: &ResponsesRequest) -> Result<(), ApiError> {
    if request.background == Some(true) {
        return Err(ApiError::param(
            "background",
            "background responses are not supported: send the request without \
             `background` (streaming with `stream: true` gives progress as it comes)",
        ));
    }
    if request.conversation.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(ApiError::param(
            "conversation",
            "conversations are not supported: continue a response with `previous_response_id`",
        ));
    }
    if request.prompt.as_ref().is_some_and(|p| !p.is_null()) {
        return Err(ApiError::param(
            "prompt",
            "stored prompt templates are not supported: send `instructions` and `input`",
        ));
    }
    Ok(())
}

/// The errors of the shared chat validation, naming the Responses fields.
fn renamed(e: ApiError) -> ApiError {
    match e {
        ApiError::InvalidParam { param, message } => ApiError::InvalidParam {
            param: match param {
                "messages" => "input",
                "response_format" => "text.format",
                other => other,
            },
            message,
        },
        e => e,
    }
}

/// The turns the template renders: `instructions` as a system turn before the conversation,
/// which passes as it is (a template that refuses its shape, several system turns or two user
/// turns in a row, renders it folded: see [`super::prompt_ids`]).
fn rendered_turns(instructions: Option<String>, conversation: &[ChatMessage]) -> Vec<ChatMessage> {
    let system = instructions.map(|text| ChatMessage::new("system", text));
    system
        .into_iter()
        .chain(conversation.iter().cloned())
        .collect()
}

/// `history`, then the turns of `input`.
fn conversation(
    history: Vec<ChatMessage>,
    input: ResponseInput,
) -> Result<Vec<ChatMessage>, ApiError> {
    let mut turns = history;
    match input {
        ResponseInput::Text(text) => turns.push(ChatMessage::new("user", text)),
        ResponseInput::Items(items) => {
            for (i, value) in items.into_iter().enumerate() {
                let item = InputItem::parse(value).map_err(|e| bad_item(i, e.to_string()))?;
                push_item(&mut turns, i, item)?;
            }
        }
    }
    Ok(turns)
}

fn bad_item(i: usize, what: impl std::fmt::Display) -> ApiError {
    ApiError::param("input", format!("input[{i}]: {what}"))
}

fn push_item(turns: &mut Vec<ChatMessage>, i: usize, item: InputItem) -> Result<(), ApiError> {
    match item {
        InputItem::Message(m) => {
            let role = match m.role.as_str() {
                "user" | "system" | "assistant" => m.role.clone(),
                "developer" => "system".to_string(),
                other => {
                    return Err(bad_item(
                        i,
                        format!(
                            "role {other:?} is not supported (user, system, developer or \
                             assistant; tool results are function_call_output items)"
                        ),
                    ))
                }
            };
            let text = match m.content {
                InputContent::Text(t) => t,
                InputContent::Parts(parts) => parts_text(i, &parts)?,
            };
            turns.push(ChatMessage::new(role, text));
        }
        InputItem::FunctionCall(call) => push_call(turns, i, call)?,
        InputItem::FunctionCallOutput(output) => push_output(turns, i, output)?,
        InputItem::Reasoning(_) => {}
    }
    Ok(())
}

/// The text of content parts; anything but text is refused, naming the part type.
fn parts_text(i: usize, parts: &[InputContentPart]) -> Result<String, ApiError> {
    let mut text = String::new();
    for part in parts {
        match (part.kind.as_str(), &part.text, &part.refusal) {
            ("input_text" | "output_text" | "text", Some(t), _) => text.push_str(t),
            ("refusal", _, Some(r)) => text.push_str(r),
            (kind @ ("input_image" | "input_file" | "input_audio"), _, _) => {
                return Err(bad_item(
                    i,
                    format!(
                        "content part type {kind:?} is not supported: this server takes text \
                         only (input_text, output_text)"
                    ),
                ))
            }
            (kind, _, _) => {
                return Err(bad_item(
                    i,
                    format!(
                        "content part type {kind:?} is not supported, or has no text \
                         (input_text, output_text)"
                    ),
                ))
            }
        }
    }
    Ok(text)
}

/// A call joins the assistant turn just before it, or opens one.
fn push_call(
    turns: &mut Vec<ChatMessage>,
    i: usize,
    call: FunctionCallItem,
) -> Result<(), ApiError> {
    let raw = json!({
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    });
    let templated = crate::tools::template_tool_calls(&[raw]).map_err(|e| bad_item(i, e.0))?;
    let Value::Array(mut one) = templated else {
        return Err(bad_item(i, "the call could not be read"));
    };
    if let Some(last) = turns.last_mut().filter(|t| t.role == "assistant") {
        match &mut last.tool_calls {
            Some(Value::Array(calls)) => calls.append(&mut one),
            _ => last.tool_calls = Some(Value::Array(one)),
        }
        return Ok(());
    }
    turns.push(ChatMessage {
        role: "assistant".into(),
        content: None,
        tool_calls: Some(Value::Array(one)),
        tool_call_id: None,
        name: None,
    });
    Ok(())
}

/// A call's result: a `tool` turn naming the call and (found among the earlier calls) its
/// function.
fn push_output(
    turns: &mut Vec<ChatMessage>,
    i: usize,
    output: FunctionCallOutputItem,
) -> Result<(), ApiError> {
    let content = match output.output {
        InputContent::Text(t) => t,
        InputContent::Parts(parts) => parts_text(i, &parts)?,
    };
    let name = function_name(turns, &output.call_id);
    turns.push(ChatMessage {
        content: Some(content),
        tool_call_id: Some(output.call_id),
        name,
        ..ChatMessage::new("tool", "")
    });
    Ok(())
}

/// The function an earlier call with id `call_id` named.
fn function_name(turns: &[ChatMessage], call_id: &str) -> Option<String> {
    turns
        .iter()
        .rev()
        .filter_map(|t| t.tool_calls.as_ref()?.as_array())
        .flatten()
        .find(|c| c.get("id").and_then(Value::as_str) == Some(call_id))
        .and_then(|c| c.pointer("/function/name")?.as_str().map(str::to_string))
}

/// The function tools of a request.
#[derive(Debug, Default)]
struct Functions {
    /// In OpenAI's chat shape.
    tools: Vec<Value>,
    /// Function name -> the `namespace` tool it came in.
    namespaces: HashMap<String, String>,
}

/// The function tools in OpenAI's chat shape, those inside `namespace` tools included (their
/// calls name the namespace); tools of other types are left out (the model cannot run them).
fn function_tools(tools: Vec<Value>) -> Result<Functions, ApiError> {
    let mut out = Functions::default();
    for (i, tool) in tools.iter().enumerate() {
        let Some(map) = tool.as_object() else {
            return Err(ApiError::param(
                "tools",
                format!("tools[{i}] must be an object"),
            ));
        };
        match map.get("type").and_then(Value::as_str) {
            Some("function") => out.tools.push(chat_function(map)),
            Some("namespace") => namespace(&mut out, i, map)?,
            Some(_) => {}
            None => {
                return Err(ApiError::param(
                    "tools",
                    format!("tools[{i}] needs a \"type\""),
                ))
            }
        }
    }
    Ok(out)
}

/// The functions of `namespace` tool `i`.
fn namespace(out: &mut Functions, i: usize, tool: &Map<String, Value>) -> Result<(), ApiError> {
    let bad = |what: &str| ApiError::param("tools", format!("tools[{i}]: {what}"));
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("a namespace needs a \"name\""))?;
    let nested = tool
        .get("tools")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("a namespace needs a \"tools\" list"))?;
    for function in nested.iter().filter_map(Value::as_object) {
        if function.get("type").and_then(Value::as_str) != Some("function") {
            continue;
        }
        if let Some(f) = function.get("name").and_then(Value::as_str) {
            out.namespaces.insert(f.to_string(), name.to_string());
        }
        out.tools.push(chat_function(function));
    }
    Ok(())
}

/// `{"type": "function", "name", ...}` as `{"type": "function", "function": {"name", ...}}`
/// (a tool already in that shape is kept).
fn chat_function(tool: &Map<String, Value>) -> Value {
    if tool.contains_key("function") {
        return Value::Object(tool.clone());
    }
    let function: Map<String, Value> = ["name", "description", "parameters", "strict"]
        .into_iter()
        .filter_map(|k| Some((k.to_string(), tool.get(k)?.clone())))
        .filter(|(_, v)| !v.is_null())
        .collect();
    json!({"type": "function", "function": function})
}

/// `tool_choice` in OpenAI's chat shape. Without function tools, `auto` and `none` mean
/// nothing and are dropped.
fn tool_choice(choice: Option<Value>, no_tools: bool) -> Result<Option<Value>, ApiError> {
    let choice = match choice {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if no_tools && (s == "auto" || s == "none") => return Ok(None),
        Some(c @ Value::String(_)) => c,
        Some(Value::Object(map)) => match map.get("type").and_then(Value::as_str) {
            Some("function") if map.contains_key("function") => Value::Object(map),
            Some("function") => match map.get("name").and_then(Value::as_str) {
                Some(name) => json!({"type": "function", "function": {"name": name}}),
                None => {
                    return Err(ApiError::param(
                        "tool_choice",
                        "a function tool_choice needs a \"name\"",
                    ))
                }
            },
            other => {
                return Err(ApiError::param(
                    "tool_choice",
                    format!(
                        "tool_choice type {:?} is not supported: only function tools can be \
                         called (\"none\", \"auto\", \"required\" or {{\"type\": \"function\", \
                         \"name\": ..}})",
                        other.unwrap_or("")
                    ),
                ))
            }
        },
        Some(_) => {
            return Err(ApiError::param(
                "tool_choice",
                "tool_choice must be a string or an object",
            ))
        }
    };
    Ok(Some(choice))
}

/// `text.format` as the chat `response_format` (`text` is no constraint).
fn text_format(format: Option<TextFormat>) -> Option<ResponseFormat> {
    let format = format?;
    let json_schema = (format.kind == "json_schema").then(|| JsonSchemaFormat {
        name: format.name,
        description: format.description,
        schema: format.schema,
        strict: format.strict,
    });
    Some(ResponseFormat {
        kind: format.kind,
        json_schema,
        value: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(values: Value) -> ResponseInput {
        ResponseInput::Items(values.as_array().unwrap().clone())
    }

    #[test]
    fn items_become_turns_with_calls_joined_and_outputs_named() {
        let input = items(json!([
            {"role": "developer", "content": "be brief"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\":1}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "42"},
        ]));
        let turns = conversation(vec![ChatMessage::new("user", "before")], input).unwrap();
        let roles: Vec<&str> = turns.iter().map(|t| t.role.as_str()).collect();
        assert_eq!(roles, ["user", "system", "user", "assistant", "tool"]);
        assert_eq!(turns[2].content.as_deref(), Some("ab"));
        let calls = turns[3].tool_calls.as_ref().unwrap().as_array().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["function"]["arguments"]["x"], 1);
        assert_eq!(turns[4].name.as_deref(), Some("g"));
        assert_eq!(turns[4].tool_call_id.as_deref(), Some("c2"));
    }

    #[test]
    fn instructions_open_the_prompt_and_the_turns_pass_as_they_are() {
        let conversation = vec![
            ChatMessage::new("system", "dev one"),
            ChatMessage::new("system", "dev two"),
            ChatMessage::new("user", "context"),
            ChatMessage::new("user", "question"),
        ];
        let turns = rendered_turns(Some("rules".into()), &conversation);
        let shown: Vec<(&str, &str)> = turns
            .iter()
            .map(|t| (t.role.as_str(), t.content.as_deref().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                ("system", "rules"),
                ("system", "dev one"),
                ("system", "dev two"),
                ("user", "context"),
                ("user", "question"),
            ]
        );
        assert_eq!(
            rendered_turns(None, &conversation).len(),
            conversation.len()
        );
    }

    #[test]
    fn images_and_unknown_items_are_refused_by_index() {
        let image = items(json!([
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]},
        ]));
        let e = conversation(Vec::new(), image).unwrap_err();
        assert!(
            e.to_string().contains("input[1]") && e.to_string().contains("input_image"),
            "{e}"
        );
        let shell = items(json!([{"type": "local_shell_call", "call_id": "c"}]));
        let e = conversation(Vec::new(), shell).unwrap_err();
        assert!(e.to_string().contains("local_shell_call"), "{e}");
    }

    #[test]
    fn function_tools_take_the_chat_shape_and_others_are_left_out() {
        let functions = function_tools(vec![
            json!({"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true, "description": null}),
            json!({"type": "web_search"}),
            json!({"type": "custom", "name": "apply_patch"}),
            json!({"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "spawn"}]}),
        ])
        .unwrap();
        assert_eq!(
            functions.tools,
            vec![
                json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}),
                json!({"type": "function", "function": {"name": "spawn"}}),
            ]
        );
        assert_eq!(functions.namespaces["spawn"], "agents");
        let named = tool_choice(Some(json!({"type": "function", "name": "f"})), false).unwrap();
        assert_eq!(
            named,
            Some(json!({"type": "function", "function": {"name": "f"}}))
        );
        assert_eq!(tool_choice(Some(json!("auto")), true).unwrap(), None);
        assert!(tool_choice(Some(json!({"type": "web_search_preview"})), false).is_err());
    }
}
