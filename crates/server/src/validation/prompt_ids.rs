//! Prompt token ids: completion prompts (text or ids, one or a list) and chat conversations
//! rendered with the model's template, each within the input byte limit before tokenizing.

use kestrel_model::chat_prompt::ChatPromptError;
use kestrel_model::chat_template::{ChatMessage, ChatTemplateError, TemplateKwargs};
use kestrel_model::turn_folding::fold_turns;

use crate::error::ApiError;
use crate::openai::wire::{ChatMessageIn, MessageContent, Prompt};
use crate::state::AppState;
use crate::validation::param_ranges as ranges;

/// One prompt of a completion request: its token ids, and its text when given as text.
pub(super) type PromptIds = (Vec<u32>, Option<String>);

/// The prompts of a completion request.
pub(super) fn completion_prompts(
    state: &AppState,
    prompt: Prompt,
) -> Result<Vec<PromptIds>, ApiError> {
    let texts = |list: Vec<String>| {
        list.into_iter()
            .map(|text| Ok((encode(state, &text, true, "prompt")?, Some(text))))
            .collect::<Result<Vec<_>, ApiError>>()
    };
    let prompts = match prompt {
        Prompt::Text(text) => texts(vec![text])?,
        Prompt::TextList(list) => texts(list)?,
        Prompt::Tokens(ids) => vec![(ids, None)],
        Prompt::TokenLists(lists) => lists.into_iter().map(|ids| (ids, None)).collect(),
    };
    if prompts.is_empty() {
        return Err(ApiError::param("prompt", "the prompt list is empty"));
    }
    Ok(prompts)
}

/// The prompt ids of a conversation: the model's template rendered over `turns` with `tools`
/// and the request's template `kwargs`.
pub(super) fn chat_prompt_ids(
    state: &AppState,
    turns: &[ChatMessage],
    tools: Option<&[serde_json::Value]>,
    kwargs: Option<&TemplateKwargs>,
) -> Result<Vec<u32>, ApiError> {
    if turns.len() < ranges::MIN_MESSAGES {
        return Err(ApiError::param("messages", "messages must not be empty"));
    }
    let template = state.model().chat_template.as_ref().ok_or_else(|| {
        ApiError::Invalid("this model has no chat template; use /v1/completions".into())
    })?;
    let content_bytes = turns
        .iter()
        .map(|t| t.content.as_ref().map_or(0, String::len))
        .sum();
    state
        .limits()
        .check_input_bytes("messages", content_bytes)?;
    let encode = |turns: &[ChatMessage]| {
        kestrel_model::chat_prompt::encode_chat(
            template,
            state.tokenizer(),
            turns,
            tools,
            kwargs,
            true,
        )
    };
    // A template that refuses the conversation's shape (several system messages, a system
    // message after a user turn, roles that do not alternate, a tool role it lacks) gets the
    // same words folded into the shape it takes; if that fails too, the first refusal stands.
    encode(turns)
        .or_else(|e| match e {
            ChatPromptError::Template(ChatTemplateError::Raised(_)) => {
                encode(&fold_turns(turns)).map_err(|_| e)
            }
            e => Err(e),
        })
        .map_err(|e| match e {
            ChatPromptError::Template(ChatTemplateError::ReservedKwarg(_)) => {
                ApiError::param("chat_template_kwargs", e.to_string())
            }
            e => ApiError::param("messages", e.to_string()),
        })
}

/// One OpenAI chat message as the template sees it.
pub(super) fn chat_message(m: &ChatMessageIn) -> Result<ChatMessage, ApiError> {
    let tool_calls = match m.tool_calls.as_deref() {
        None | Some([]) => None,
        Some(calls) => Some(
            crate::tools::template_tool_calls(calls)
                .map_err(|e| ApiError::param("messages", e.0))?,
        ),
    };
    let content = match &m.content {
        // An assistant turn that only calls tools has no content (templates see none).
        None if tool_calls.is_some() => {
            return Ok(ChatMessage {
                role: m.role.clone(),
                content: None,
                tool_calls,
                tool_call_id: m.tool_call_id.clone(),
                name: m.name.clone(),
            })
        }
        None => String::new(),
        Some(MessageContent::Text(t)) => t.clone(),
        Some(MessageContent::Parts(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.kind.as_str(), &part.text) {
                    ("text", Some(t)) => text.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::param(
                            "messages",
                            format!("content part type {kind:?} is not supported (only text)"),
                        ))
                    }
                }
            }
            text
        }
    };
    Ok(ChatMessage {
        tool_calls,
        tool_call_id: m.tool_call_id.clone(),
        name: m.name.clone(),
        ..ChatMessage::new(m.role.clone(), content)
    })
}

pub(super) fn encode(
    state: &AppState,
    text: &str,
    add_special: bool,
    param: &'static str,
) -> Result<Vec<u32>, ApiError> {
    state.limits().check_input_bytes(param, text.len())?;
    state
        .tokenizer()
        .encode(text, add_special)
        .map_err(|e| ApiError::param(param, format!("cannot tokenize: {e}")))
}
