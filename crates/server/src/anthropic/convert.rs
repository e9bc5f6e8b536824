//! A Messages request read into a [`ChatCall`], the conversation every chat API hands to
//! validation, so that templates, tools, limits and sampling are checked as on chat
//! completions:
//!
//! ```text
//! system (string | text blocks)      ─► a `system` turn
//! user: text blocks                  ─► a `user` turn (blocks joined by newlines)
//! system (a turn in `messages`)      ─► user text before the words of the user turn next to
//!                                       it (Claude Code's mid-conversation instructions;
//!                                       templates take one system turn, first)
//! consecutive user texts             ─► one `user` turn (as Anthropic combines them)
//! user: tool_result blocks           ─► one `tool` turn each (tool_call_id, the call's name)
//! assistant: text + tool_use blocks  ─► an `assistant` turn with OpenAI-shaped tool_calls
//! assistant: thinking blocks         ─► left out
//! image / document blocks            ─► 400 naming the block
//! tools [{name, description, input_schema}] ─► [{"type": "function", "function": {..}}]
//! tool_choice auto | any | tool | none      ─► "auto" | "required" | {function} | "none"
//! disable_parallel_tool_use                  ─► parallel_tool_calls: false
//! thinking enabled | disabled                ─► chat_template_kwargs.enable_thinking
//! thinking of another type (adaptive)        ─► the template's default
//! ```

use std::collections::HashMap;
use std::time::Instant;

use kestrel_model::chat_template::{ChatMessage, TemplateKwargs};
use serde_json::{json, Value};

use super::wire::{
    BlockContent, CountTokensRequest, InputBlock, InputMessage, MessagesRequest, RawBlock,
    ThinkingConfig, Tool, ToolChoiceIn,
};
use crate::error::ApiError;
use crate::openai::wire::SamplingFields;
use crate::state::AppState;
use crate::validation::chat_call::{self, ChatCall, MaxTokens};
use crate::validation::chat_tools::AutoWithoutFormat;
use crate::validation::{ValidRequest, Validate};
use crate::wire::structured::StructuredFields;
use crate::wire::StopSequences;

/// The prompt parts both routes share.
struct PromptParts<'a> {
    model: Option<String>,
    system: Option<&'a BlockContent>,
    messages: &'a [InputMessage],
    tools: Option<&'a [Value]>,
    tool_choice: Option<&'a ToolChoiceIn>,
    thinking: Option<&'a ThinkingConfig>,
    kwargs: Option<TemplateKwargs>,
}

impl Validate for MessagesRequest {
    type Valid = ValidRequest;
    fn validate(self, state: &AppState, arrival: Instant) -> Result<ValidRequest, ApiError> {
        let call = messages_call(state, self)?;
        chat_call::validate(state, call, arrival)
    }
}

impl Validate for CountTokensRequest {
    type Valid = ValidRequest;
    /// Validated as a one-token request, so that the count is the prompt a create with the
    /// same body would run.
    fn validate(self, state: &AppState, arrival: Instant) -> Result<ValidRequest, ApiError> {
        let parts = PromptParts {
            model: self.model,
            system: self.system.as_ref(),
            messages: &self.messages,
            tools: self.tools.as_deref(),
            tool_choice: self.tool_choice.as_ref(),
            thinking: self.thinking.as_ref(),
            kwargs: self.chat_template_kwargs,
        };
        let call = chat_call_of(state, parts, SamplingFields::default(), Some(1), false)?;
        chat_call::validate(state, call, arrival)
    }
}

/// The [`ChatCall`] of a `POST /v1/messages` body.
fn messages_call(state: &AppState, req: MessagesRequest) -> Result<ChatCall, ApiError> {
    let max_tokens = req
        .max_tokens
        .ok_or_else(|| ApiError::param("max_tokens", "max_tokens: Field required"))?;
    let stops = req.stop_sequences.filter(|s| !s.is_empty());
    let sampling = SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        // The stop string stays in the engine's text, so that the one that matched can be
        // named; the route cuts it off (see `super::stop`).
        include_stop_str_in_output: stops.as_ref().map(|_| true),
        stop: stops.map(StopSequences::Many),
        ..SamplingFields::default()
    };
    let parts = PromptParts {
        model: req.model,
        system: req.system.as_ref(),
        messages: &req.messages,
        tools: req.tools.as_deref(),
        tool_choice: req.tool_choice.as_ref(),
        thinking: req.thinking.as_ref(),
        kwargs: req.chat_template_kwargs,
    };
    let stream = req.stream.unwrap_or(false);
    let mut call = chat_call_of(state, parts, sampling, Some(max_tokens), stream)?;
    call.structured.guided_grammar = req.guided_grammar;
    Ok(call)
}

fn chat_call_of(
    state: &AppState,
    parts: PromptParts<'_>,
    sampling: SamplingFields,
    max_tokens: Option<i64>,
    stream: bool,
) -> Result<ChatCall, ApiError> {
    let choice = parts.tool_choice.map(tool_choice).transpose()?;
    Ok(ChatCall {
        model: parts.model,
        turns: turns(parts.system, parts.messages)?,
        tools: parts.tools.map(tools).transpose()?,
        tool_choice: choice.as_ref().map(|c| c.0.clone()),
        parallel_tool_calls: choice.and_then(|c| c.1),
        auto_without_format: AutoWithoutFormat::ReadAsText,
        kwargs: kwargs(state, parts.kwargs, parts.thinking)?,
        sampling,
        structured: StructuredFields::default(),
        max_tokens: MaxTokens {
            requested: max_tokens,
            param: "max_tokens",
            clamp: true,
        },
        logprobs: None,
        prompt_logprobs: None,
        stream,
        include_usage: true,
    })
}

/// The conversation as the template sees it.
fn turns(
    system: Option<&BlockContent>,
    messages: &[InputMessage],
) -> Result<Vec<ChatMessage>, ApiError> {
    let mut turns = Vec::with_capacity(messages.len() + 1);
    let system = match system {
        None => None,
        Some(BlockContent::Text(t)) => Some(t.clone()),
        Some(BlockContent::Blocks(blocks)) => Some(text_of(blocks, "system")?),
    };
    if let Some(text) = system.filter(|t| !t.is_empty()) {
        turns.push(ChatMessage::new("system", text));
    }
    // Call ids to names, for the `tool` turns that answer them.
    let mut names: HashMap<String, String> = HashMap::new();
    // Instructions (`system` turns in `messages`) waiting for the next user turn.
    let mut instructions = String::new();
    for (i, m) in messages.iter().enumerate() {
        if m.role == "system" {
            let text = match &m.content {
                BlockContent::Text(t) => t.clone(),
                BlockContent::Blocks(blocks) => text_of(blocks, "messages")?,
            };
            place_instructions(&mut turns, &mut instructions, text);
            continue;
        }
        let blocks = match &m.content {
            BlockContent::Text(t) => {
                push_merged(&mut turns, ChatMessage::new(role(i, &m.role)?, t.clone()));
                continue;
            }
            BlockContent::Blocks(blocks) => blocks
                .iter()
                .enumerate()
                .map(|(j, b)| block(&b.0, &format!("messages[{i}].content[{j}]")))
                .collect::<Result<Vec<_>, _>>()?,
        };
        match role(i, &m.role)? {
            "assistant" => turns.push(assistant_turn(i, blocks, &mut names)?),
            _ => user_turns(i, blocks, &names, &mut turns)?,
        }
        if !instructions.is_empty() {
            place_instructions(&mut turns, &mut instructions, String::new());
        }
    }
    if !instructions.is_empty() {
        turns.push(ChatMessage::new("user", instructions));
    }
    Ok(turns)
}

/// Puts the text of a `system` turn in `messages` (Claude Code sends instructions this way,
/// after the user's words) before the words of the user turn next to it: the last turn when
/// it is plain user text, else the next user turn (`pending` holds it until then). The
/// user's own words stay last, where a model answers them.
fn place_instructions(turns: &mut [ChatMessage], pending: &mut String, text: String) {
    let joined = [std::mem::take(pending), text]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    match turns.last_mut() {
        Some(last) if last.role == "user" && last.tool_call_id.is_none() => {
            let own = last.content.take().unwrap_or_default();
            let parts = [joined, own].into_iter().filter(|t| !t.is_empty());
            last.content = Some(parts.collect::<Vec<_>>().join("\n\n"));
        }
        _ => *pending = joined,
    }
}

/// Appends `turn`, merging it into the last turn when both are plain user text.
fn push_merged(turns: &mut Vec<ChatMessage>, turn: ChatMessage) {
    let plain_user = |t: &ChatMessage| t.role == "user" && t.tool_call_id.is_none();
    match turns.last_mut() {
        Some(last) if plain_user(last) && plain_user(&turn) => {
            let (Some(text), Some(more)) = (last.content.as_mut(), turn.content) else {
                return;
            };
            if !text.is_empty() && !more.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&more);
        }
        _ => turns.push(turn),
    }
}

/// The template role of `messages[i]` (a `system` turn's text joins a user turn).
fn role(i: usize, role: &str) -> Result<&'static str, ApiError> {
    match role {
        "user" | "system" => Ok("user"),
        "assistant" => Ok("assistant"),
        other => Err(ApiError::param(
            "messages",
            format!("messages[{i}].role: {other:?} is not \"user\", \"assistant\" or \"system\""),
        )),
    }
}

/// One content block, read; `at` names it in errors.
fn block(value: &Value, at: &str) -> Result<InputBlock, ApiError> {
    let block: InputBlock = serde_json::from_value(value.clone())
        .map_err(|e| ApiError::param("messages", format!("{at}: {e}")))?;
    match block {
        InputBlock::Image { .. } | InputBlock::Document { .. } => {
            let kind = value.get("type").and_then(Value::as_str).unwrap_or("?");
            Err(ApiError::param(
                "messages",
                format!(
                    "{at}: content blocks of type {kind:?} are not supported \
                     (the served model reads text only)"
                ),
            ))
        }
        block => Ok(block),
    }
}

/// An assistant turn: its text, and its calls in OpenAI's shape (thinking is left out).
fn assistant_turn(
    i: usize,
    blocks: Vec<InputBlock>,
    names: &mut HashMap<String, String>,
) -> Result<ChatMessage, ApiError> {
    let (mut texts, mut calls) = (Vec::new(), Vec::new());
    for b in blocks {
        match b {
            InputBlock::Text { text } => texts.push(text),
            InputBlock::ToolUse { id, name, input } => {
                names.insert(id.clone(), name.clone());
                let function = json!({"name": name, "arguments": input});
                calls.push(json!({"id": id, "type": "function", "function": function}));
            }
            InputBlock::Thinking { .. } | InputBlock::RedactedThinking { .. } => {}
            _ => {
                return Err(ApiError::param(
                    "messages",
                    format!("messages[{i}]: an assistant turn holds text, tool_use and thinking blocks only"),
                ))
            }
        }
    }
    let tool_calls = match calls.as_slice() {
        [] => None,
        calls => Some(
            crate::tools::template_tool_calls(calls)
                .map_err(|e| ApiError::param("messages", format!("messages[{i}]: {}", e.0)))?,
        ),
    };
    let text = texts.join("\n");
    Ok(ChatMessage {
        // A turn that only calls tools has no content (templates see none).
        content: (!text.is_empty() || tool_calls.is_none()).then_some(text),
        tool_calls,
        ..ChatMessage::new("assistant", "")
    })
}

/// A user turn: a `tool` turn per tool result, and a `user` turn for the text around them (in
/// order).
fn user_turns(
    i: usize,
    blocks: Vec<InputBlock>,
    names: &HashMap<String, String>,
    turns: &mut Vec<ChatMessage>,
) -> Result<(), ApiError> {
    let mut texts: Vec<String> = Vec::new();
    let mut answered = false;
    for b in blocks {
        match b {
            InputBlock::Text { text } => texts.push(text),
            InputBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                if !texts.is_empty() {
                    push_merged(turns, ChatMessage::new("user", texts.join("\n")));
                    texts.clear();
                }
                let at = format!("messages[{i}].tool_result");
                let text = tool_result_text(content.as_ref(), &at)?;
                let text = match is_error {
                    Some(true) => format!("Error: {text}"),
                    _ => text,
                };
                turns.push(ChatMessage {
                    name: names.get(&tool_use_id).cloned(),
                    tool_call_id: Some(tool_use_id),
                    ..ChatMessage::new("tool", text)
                });
                answered = true;
            }
            _ => {
                return Err(ApiError::param(
                    "messages",
                    format!("messages[{i}]: a user turn holds text and tool_result blocks only"),
                ))
            }
        }
    }
    if !texts.is_empty() || !answered {
        push_merged(turns, ChatMessage::new("user", texts.join("\n")));
    }
    Ok(())
}

/// A tool result's content: a string or text blocks.
fn tool_result_text(content: Option<&Value>, at: &str) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let blocks: Vec<RawBlock> = blocks.iter().cloned().map(RawBlock).collect();
            text_of(&blocks, at)
        }
        Some(_) => Err(ApiError::param(
            "messages",
            format!("{at}.content: must be a string or a list of text blocks"),
        )),
    }
}

/// The text of blocks that may only be text, joined by newlines.
fn text_of(blocks: &[RawBlock], at: &str) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(blocks.len());
    for (j, b) in blocks.iter().enumerate() {
        match block(&b.0, &format!("{at}[{j}]"))? {
            InputBlock::Text { text } => texts.push(text),
            _ => {
                return Err(ApiError::param(
                    "messages",
                    format!("{at}[{j}]: only text blocks are allowed here"),
                ))
            }
        }
    }
    Ok(texts.join("\n"))
}

/// Custom tools in OpenAI's chat shape; a server tool is a 400 naming its type.
fn tools(tools: &[Value]) -> Result<Vec<Value>, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let tool: Tool = serde_json::from_value(t.clone())
                .map_err(|e| ApiError::param("tools", format!("tools[{i}]: {e}")))?;
            if let Some(kind) = tool.kind.filter(|k| k != "custom") {
                return Err(ApiError::param(
                    "tools",
                    format!(
                        "tools[{i}]: server tools (type {kind:?}) are not supported; \
                         only custom tools (name, description, input_schema)"
                    ),
                ));
            }
            let mut function = json!({"name": tool.name});
            if let Some(d) = tool.description {
                function["description"] = Value::String(d);
            }
            if let Some(schema) = tool.input_schema {
                function["parameters"] = schema;
            }
            Ok(json!({"type": "function", "function": function}))
        })
        .collect()
}

/// `tool_choice` in OpenAI's chat shape, and `parallel_tool_calls`.
fn tool_choice(c: &ToolChoiceIn) -> Result<(Value, Option<bool>), ApiError> {
    let choice = match (c.kind.as_str(), &c.name) {
        ("auto", _) => json!("auto"),
        ("any", _) => json!("required"),
        ("none", _) => json!("none"),
        ("tool", Some(name)) => json!({"type": "function", "function": {"name": name}}),
        ("tool", None) => {
            return Err(ApiError::param(
                "tool_choice",
                "tool_choice of type \"tool\" needs the tool's `name`",
            ))
        }
        (other, _) => {
            return Err(ApiError::param(
                "tool_choice",
                format!(
                    "tool_choice type {other:?} is not one of \"auto\", \"any\", \"tool\", \"none\""
                ),
            ))
        }
    };
    Ok((choice, c.disable_parallel_tool_use.map(|d| !d)))
}

/// The template variables: the request's `chat_template_kwargs` with `thinking`'s switch over
/// them.
fn kwargs(
    state: &AppState,
    given: Option<TemplateKwargs>,
    t: Option<&ThinkingConfig>,
) -> Result<Option<TemplateKwargs>, ApiError> {
    let switch = t.map(|t| thinking(state, t)).transpose()?.flatten();
    Ok(match (given, switch) {
        (Some(mut given), Some(switch)) => {
            given.extend(switch);
            Some(given)
        }
        (given, switch) => given.or(switch),
    })
}

/// `thinking` as the template's `enable_thinking`, where the template reads that variable
/// (else nothing: the template has no switch). `enabled` and `disabled` set it; other types
/// (Claude Code sends `adaptive`) leave the template's default.
fn thinking(state: &AppState, t: &ThinkingConfig) -> Result<Option<TemplateKwargs>, ApiError> {
    let enable = match t.kind.as_str() {
        "enabled" => true,
        "disabled" => false,
        _ => return Ok(None),
    };
    if t.budget_tokens.is_some_and(|b| b < 1) {
        return Err(ApiError::param(
            "thinking",
            "thinking.budget_tokens must be at least 1",
        ));
    }
    let reads_switch = state
        .model()
        .chat_template
        .as_ref()
        .is_some_and(|t| t.source().contains("enable_thinking"));
    Ok(reads_switch.then(|| {
        let mut kwargs = TemplateKwargs::new();
        kwargs.insert("enable_thinking".into(), Value::Bool(enable));
        kwargs
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, content: Value) -> InputMessage {
        serde_json::from_value(json!({"role": role, "content": content})).unwrap()
    }

    #[test]
    fn tool_turns_become_openai_shaped_calls_and_tool_messages() {
        let system = BlockContent::Blocks(vec![RawBlock(
            json!({"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}),
        )]);
        let messages = [
            message("user", json!("weather?")),
            message(
                "assistant",
                json!([
                    {"type": "thinking", "thinking": "hmm", "signature": "x"},
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"city": "Oslo"}}
                ]),
            ),
            message(
                "user",
                json!([
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "rain"}], "is_error": true},
                    {"type": "text", "text": "thanks"}
                ]),
            ),
        ];
        let t = turns(Some(&system), &messages).unwrap();
        let roles: Vec<&str> = t.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(t[0].content.as_deref(), Some("be brief"));
        assert_eq!(t[2].content.as_deref(), Some("checking"));
        let calls = t[2].tool_calls.as_ref().unwrap();
        assert_eq!(calls[0]["function"]["arguments"]["city"], "Oslo");
        assert_eq!(calls[0]["id"], "toolu_1");
        assert_eq!(t[3].content.as_deref(), Some("Error: rain"));
        assert_eq!(t[3].tool_call_id.as_deref(), Some("toolu_1"));
        assert_eq!(t[3].name.as_deref(), Some("get"));
        assert_eq!(t[4].content.as_deref(), Some("thanks"));
    }

    #[test]
    fn system_turns_and_consecutive_user_texts_merge_into_one_user_turn() {
        let messages = [
            message(
                "user",
                json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]),
            ),
            message("system", json!("reminder")),
            message("user", json!("c")),
            message("assistant", json!("ok")),
            message("system", json!("late")),
        ];
        let t = turns(Some(&BlockContent::Text("sys".into())), &messages).unwrap();
        let shown: Vec<(&str, &str)> = t
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_deref().unwrap_or("")))
            .collect();
        assert_eq!(
            shown,
            [
                ("system", "sys"),
                ("user", "reminder\n\na\nb\n\nc"),
                ("assistant", "ok"),
                ("user", "late")
            ]
        );
    }

    #[test]
    fn images_and_unknown_blocks_are_refused_by_name() {
        let image = message(
            "user",
            json!([{"type": "image", "source": {"type": "base64", "data": ""}}]),
        );
        let e = turns(None, &[image]).unwrap_err().to_string();
        assert!(
            e.contains("\"image\"") && e.contains("messages[0].content[0]"),
            "{e}"
        );
        let odd = message("user", json!([{"type": "hologram"}]));
        let e = turns(None, &[odd]).unwrap_err().to_string();
        assert!(e.contains("hologram"), "{e}");
    }

    #[test]
    fn tools_and_choices_map_to_the_chat_shape() {
        let t =
            tools(&[json!({"name": "f", "input_schema": {"type": "object"}, "cache_control": {}})])
                .unwrap();
        assert_eq!(t[0]["function"]["parameters"]["type"], "object");
        let server = tools(&[json!({"type": "web_search_20250305", "name": "web_search"})]);
        assert!(server
            .unwrap_err()
            .to_string()
            .contains("web_search_20250305"));
        let choice = |v: Value| tool_choice(&serde_json::from_value(v).unwrap());
        assert_eq!(choice(json!({"type": "any"})).unwrap().0, json!("required"));
        let (named, parallel) =
            choice(json!({"type": "tool", "name": "f", "disable_parallel_tool_use": true}))
                .unwrap();
        assert_eq!(named["function"]["name"], "f");
        assert_eq!(parallel, Some(false));
        assert!(choice(json!({"type": "tool"})).is_err());
    }
}
