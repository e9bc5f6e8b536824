//! [`ChatCall`]: a conversation as every chat API (chat completions, Anthropic's Messages,
//! OpenAI's Responses) hands it to validation once its own wire shape is read; [`validate`]
//! turns it into the one [`ValidRequest`] all of them submit. The tool rules, template
//! rendering, length limits and sampling checks are therefore the same on every chat route.

use std::time::Instant;

use kestrel_engine::sampling::SamplingParams;
use kestrel_model::chat_template::{ChatMessage, TemplateKwargs};
use serde_json::Value;

use crate::error::ApiError;
use crate::openai::wire::SamplingFields;
use crate::state::AppState;
use crate::wire::structured::StructuredFields;

use super::chat_tools::{self, AutoWithoutFormat};
use super::prompt_ids::chat_prompt_ids;
use super::sampling_fields::{choices_n, max_tokens, openai_sampling, prompt_logprobs};
use super::{constraint, engine_request, openai_adapter, ValidPrompt, ValidRequest};

/// How a route reads its output-length field.
#[derive(Debug, Clone, Copy)]
pub struct MaxTokens {
    /// The value asked for; `None`: as much as the context leaves.
    pub requested: Option<i64>,
    /// The field's name, for errors.
    pub param: &'static str,
    /// Cut a request beyond the context down to what fits instead of refusing it (Anthropic's
    /// `max_tokens` is required, and clients send their model's output limit).
    pub clamp: bool,
}

/// A conversation and its generation settings, from any chat API.
#[derive(Debug, Clone)]
pub struct ChatCall {
    /// The served model's id or an adapter's name (absent: the base model).
    pub model: Option<String>,
    pub turns: Vec<ChatMessage>,
    /// Tools in OpenAI's chat shape (`{"type": "function", "function": {..}}`).
    pub tools: Option<Vec<Value>>,
    /// `tool_choice` in OpenAI's chat shape.
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    /// What `auto` does on a model whose call format is unknown.
    pub auto_without_format: AutoWithoutFormat,
    /// Extra template variables (`chat_template_kwargs`).
    pub kwargs: Option<TemplateKwargs>,
    pub sampling: SamplingFields,
    pub structured: StructuredFields,
    pub max_tokens: MaxTokens,
    /// Alternatives per token when logprobs are asked for.
    pub logprobs: Option<usize>,
    pub prompt_logprobs: Option<i64>,
    pub stream: bool,
    pub include_usage: bool,
}

/// Validates a conversation from any chat API.
pub fn validate(
    state: &AppState,
    mut call: ChatCall,
    arrival: Instant,
) -> Result<ValidRequest, ApiError> {
    let (adapter_name, adapter) = openai_adapter(state, call.model.take())?;
    let n = choices_n(call.sampling.n)?;
    let tools = chat_tools::checked(
        state,
        call.tools.take(),
        call.tool_choice.as_ref(),
        call.parallel_tool_calls,
        call.auto_without_format,
    )?;
    let grammar = match (constraint::checked(state, call.structured)?, &tools.grammar) {
        (Some(_), Some(_)) => {
            return Err(ApiError::param(
                "tool_choice",
                "a forced tool call cannot be combined with structured output \
                 (response_format, guided_*, structured_outputs)",
            ))
        }
        (own, forced) => own.or_else(|| forced.clone()),
    };
    let prompt_ids = chat_prompt_ids(
        state,
        &call.turns,
        tools.tools.as_deref(),
        call.kwargs.as_ref(),
    )?;
    let max_tokens = output_tokens(state, prompt_ids.len(), call.max_tokens)?;
    let (sampling, sched) = openai_sampling(state, call.sampling, call.logprobs)?;
    let sampling = SamplingParams {
        max_tokens,
        skip_special_tokens: sampling.skip_special_tokens
            && !tools.keeps_special_tokens()
            && !keeps_reasoning_markup(state),
        ..sampling
    };
    let reasoning = state
        .model()
        .reasoning_parser
        .map(|p| p.mode(state.tokenizer(), &prompt_ids));
    let request = engine_request(state, prompt_ids, sampling, sched, arrival)?;
    Ok(ValidRequest {
        prompts: vec![ValidPrompt {
            request: request.with_adapter(adapter).with_grammar(grammar),
            echo: None,
        }],
        n,
        best_of: n,
        stream: call.stream,
        include_usage: call.include_usage,
        logprobs: call.logprobs.is_some(),
        adapter: adapter_name,
        tools: tools.mode,
        prompt_logprobs: prompt_logprobs(call.prompt_logprobs, call.stream)?,
        reasoning,
    })
}

/// The output-token budget: what was asked for (or the room left), within the context.
fn output_tokens(state: &AppState, prompt_len: usize, m: MaxTokens) -> Result<usize, ApiError> {
    let room = state.limits().max_total_tokens.saturating_sub(prompt_len);
    let requested = match m.requested {
        Some(r) if m.clamp && r > 0 => Some(r.min(room.max(1) as i64)),
        r => r,
    };
    max_tokens(state.limits(), prompt_len, requested, m.param, room)
}

/// Whether the reasoning format's markers are special tokens that detokenization must keep
/// (harmony's `<|channel|>`, `<|message|>`, …).
fn keeps_reasoning_markup(state: &AppState) -> bool {
    state.model().reasoning_parser == Some(crate::reasoning::ReasoningParser::Harmony)
}
