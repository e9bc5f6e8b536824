//! OpenAI-compatible request and response bodies (`/v1/completions`, `/v1/chat/completions`,
//! `/v1/models`) and the error envelope.
//!
//! Numeric request fields are read as wide signed types (`i64`, `f64`) so that a negative or
//! absurd value reaches validation, which names the parameter, instead of failing in serde with
//! a message about integer types.

pub mod embedding;
#[macro_use]
mod sampling;
#[macro_use]
mod request_fields;

pub use sampling::SamplingFields;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::wire::StopSequences;

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a final chunk with token usage (and `"usage": null` on every other chunk).
    #[serde(default)]
    pub include_usage: bool,
}

/// The `prompt` of a completion request: text or token ids, alone or as a list of prompts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    TextList(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

openai_request! {
/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CompletionRequest {
    /// The served model's id or a LoRA adapter's name (absent: the base model).
    pub model: Option<String>,
    pub prompt: Prompt,
    /// Most tokens to generate (default 16).
    pub max_tokens: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Number of most likely alternatives to return per token (0..=20).
    pub logprobs: Option<i64>,
    /// Prepend the prompt's text to each choice's text (not with `logprobs`: prompt logprobs
    /// are not computed).
    pub echo: Option<bool>,
    /// Candidates generated per prompt (>= `n`, not with `stream`); the `n` with the highest
    /// cumulative log-probability are returned.
    pub best_of: Option<i64>,
    /// Extension (vLLM): the log-probability of every prompt token and this many alternatives
    /// (0..=20) at each position, in each choice's `prompt_logprobs` (not with `stream`).
    pub prompt_logprobs: Option<i64>,
    /// Only absent or empty is supported.
    pub suffix: Option<String>,
}
}

/// One part of a multi-part message content.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ContentPart {
    /// Only `"text"` is supported.
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

/// A message's content: a string or a list of text parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One message of a chat request.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatMessageIn {
    pub role: String,
    pub content: Option<MessageContent>,
    /// A participant's (or, on a `tool` turn, the function's) name; passed to the template.
    pub name: Option<String>,
    /// An assistant turn's calls (`id`, `type`, `function` with `name` and `arguments`).
    #[schema(value_type = Option<Vec<Object>>)]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` turn: the id of the call it answers.
    pub tool_call_id: Option<String>,
    /// Accepted and ignored.
    pub refusal: Option<String>,
}

pub use crate::wire::structured::ResponseFormat;

openai_request! {
/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    /// The served model's id or a LoRA adapter's name (absent: the base model).
    pub model: Option<String>,
    pub messages: Vec<ChatMessageIn>,
    /// Deprecated alias of `max_completion_tokens`.
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Return the chosen tokens' log-probabilities.
    pub logprobs: Option<bool>,
    /// Alternatives per token (0..=20); needs `logprobs: true`.
    pub top_logprobs: Option<i64>,
    /// Extension (vLLM): the log-probability of every prompt token and this many alternatives
    /// (0..=20) at each position, in the response's `prompt_logprobs` (not with `stream`).
    pub prompt_logprobs: Option<i64>,
    /// Functions the model may call: `{"type": "function", "function": {name, description,
    /// parameters}}`; the chat template receives them.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<serde_json::Value>>,
    /// `"none"`, `"auto"` (calls parsed from the model's own format), `"required"` or
    /// `{"type": "function", "function": {"name": ..}}` (forced with structured output).
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<serde_json::Value>,
    /// With `tool_choice: "required"`: whether several calls may be made (default true).
    pub parallel_tool_calls: Option<bool>,
    /// Extension (vLLM): extra variables for the chat template, e.g.
    /// `{"enable_thinking": false}`; may not replace `messages`, `tools`,
    /// `add_generation_prompt`, `bos_token` or `eos_token`.
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// Accepted and ignored.
    pub store: Option<bool>,
    /// Accepted and ignored.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// Accepted and ignored.
    pub service_tier: Option<String>,
}
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct UsageInfo {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
    /// Breakdown of the completion tokens; present when the reply's reasoning was split out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// Breakdown of the completion tokens.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct CompletionTokensDetails {
    /// Tokens of the reasoning block (`<think>…</think>`).
    pub reasoning_tokens: usize,
}

/// Breakdown of the prompt tokens.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// Logprobs of a completion choice, in the legacy completions layout.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    #[schema(value_type = Vec<Object>)]
    pub top_logprobs: Vec<HashMap<String, f32>>,
    pub text_offset: Vec<usize>,
}

/// One choice of a completion (or one chunk of a streamed one).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<String>,
    /// Present when the request asked for `prompt_logprobs`: `null` for the first prompt token,
    /// then an object per token.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Option<Object>>>)]
    pub prompt_logprobs: Option<PromptLogprobs>,
}

/// vLLM's `prompt_logprobs`: per prompt token, `null` for the first, else a map from token id
/// (as a string) to its entry — the prompt token's and those of the alternatives asked for.
pub type PromptLogprobs = Vec<Option<std::collections::BTreeMap<String, PromptLogprob>>>;

/// One token's entry in [`PromptLogprobs`].
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct PromptLogprob {
    pub logprob: f32,
    /// 1 for the likeliest token at the position.
    pub rank: usize,
    pub decoded_token: String,
}

/// `/v1/completions` response, and each streamed chunk (`object` is `text_completion` for both).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageInfo>,
    /// `fp_kestrel_<hash of model and version>`.
    pub system_fingerprint: String,
}

/// An alternative token and its log-probability.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// One chosen token with its log-probability and alternatives.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// Logprobs of a chat choice.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

/// The assistant's reply.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatMessageOut {
    pub role: &'static str,
    /// The text; `null` when the reply is only tool calls.
    pub content: Option<String>,
    /// Extension (vLLM): the reasoning split from the reply (`--reasoning-parser`); absent
    /// when the reply has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The same text under vLLM's newer name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The calls the model made (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<crate::wire::tools::ToolCallOut>,
}

/// One choice of a chat completion.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatMessageOut,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: String,
}

/// `/v1/chat/completions` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: UsageInfo,
    /// `fp_kestrel_<hash of model and version>`.
    pub system_fingerprint: String,
    /// Present when the request asked for `prompt_logprobs`: `null` for the first prompt token,
    /// then an object per token.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Option<Object>>>)]
    pub prompt_logprobs: Option<PromptLogprobs>,
}

/// The change a streamed chat chunk carries.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// More reasoning text (vLLM's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The same text under vLLM's newer name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Calls completed in this chunk, each whole.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<crate::wire::tools::ToolCallDelta>,
}

/// One choice of a streamed chat chunk.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
}

/// A streamed chat chunk (`object: chat.completion.chunk`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    /// `null` on every chunk but the last when `include_usage` is set; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<UsageInfo>>,
    /// `fp_kestrel_<hash of model and version>`.
    pub system_fingerprint: String,
}

/// One served model: the base model, or a LoRA adapter whose `parent` is the base model's id
/// (vLLM's shape).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// The base model's id, or the adapter's path.
    pub root: String,
    /// The base model's id for an adapter; `null` for the base model.
    pub parent: Option<String>,
    /// Longest prompt + output in tokens; absent for a model of a multi-model server that
    /// has not been loaded yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<usize>,
    /// Whether the model is in memory, on a server of several models (`kestrel serve --model
    /// NAME=PATH ...`); absent on a server of one model, which is always loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ModelStatus>,
    /// Other names requests may give for the model (`--model-alias`, multi-model server).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
}

/// A model's state on a multi-model server, as `/v1/models` reports it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelStatus {
    /// `loaded`, `loading` or `unloaded`.
    pub value: &'static str,
    /// Why the model's last load failed (absent when it did not, or a later load succeeded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

/// The body of every OpenAI-route error.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
    /// The request's id (as in the `X-Request-Id` response header), to quote in reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}
