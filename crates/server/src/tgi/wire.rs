//! Text Generation Inference-compatible bodies (`/generate`, `/generate_stream`, `/info`,
//! `/tokenize`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::wire::StopSequences;

/// `parameters` of a TGI generate request.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct GenerateParameters {
    /// Sample instead of greedy decoding; implied by `temperature`, `top_k` or `top_p`.
    pub do_sample: Option<bool>,
    /// Most tokens to generate (default 100, clamped to what fits).
    pub max_new_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_k: Option<i64>,
    pub top_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub seed: Option<u64>,
    /// Stop sequences.
    pub stop: Option<StopSequences>,
    /// Include `details` (finish reason, token count, seed) in the response.
    pub details: Option<bool>,
    /// Alternatives per token (0..=20) in streamed `top_tokens`.
    pub top_n_tokens: Option<i64>,
    /// Prepend the prompt to `generated_text`.
    pub return_full_text: Option<bool>,
    /// Accepted only when false or absent.
    pub decoder_input_details: Option<bool>,
    /// Accepted only when 1 or absent.
    pub best_of: Option<i64>,
    /// Accepted only when absent.
    pub truncate: Option<i64>,
    /// Accepted only when false or absent.
    pub watermark: Option<bool>,
    /// Accepted only when absent or 1.0.
    pub typical_p: Option<f64>,
    /// Extension: min-p filtering in `[0, 1]`.
    pub min_p: Option<f64>,
    /// Extension: keep generating past end-of-generation tokens.
    pub ignore_eos: Option<bool>,
    /// Extension: scheduling priority, lower runs first (as in vLLM).
    pub priority: Option<i64>,
    /// The LoRA adapter to run with (its name); absent: the base model.
    pub adapter_id: Option<String>,
    /// Extension: time-to-first-token objective in milliseconds from arrival (1 to 3600000);
    /// a request predicted to miss it is refused at once with 429 and `Retry-After`.
    pub ttft_slo_ms: Option<i64>,
    /// Structured output: `{"type": "json" | "json_schema" | "regex", "value": ...}`.
    pub grammar: Option<crate::wire::structured::TgiGrammar>,
}

/// `POST /generate` and `POST /generate_stream`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct GenerateRequest {
    pub inputs: String,
    /// Which model runs it, on a server of several models (`kestrel serve --model NAME=PATH
    /// ...`); a server of one model ignores it.
    pub model: Option<String>,
    #[serde(default)]
    pub parameters: GenerateParameters,
    /// On `POST /`, whether to stream; `/generate` and `/generate_stream` ignore it.
    pub stream: Option<bool>,
}

/// Details of a finished generation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GenerateDetails {
    /// `length`, `eos_token` or `stop_sequence`.
    pub finish_reason: String,
    pub generated_tokens: usize,
    pub seed: Option<u64>,
    pub input_length: usize,
}

/// `POST /generate` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GenerateResponse {
    pub generated_text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<GenerateDetails>,
}

/// One token in a streamed response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StreamToken {
    pub id: u32,
    pub text: String,
    pub logprob: f32,
    pub special: bool,
}

/// One event of `POST /generate_stream`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StreamResponse {
    pub index: usize,
    pub token: StreamToken,
    pub top_tokens: Vec<StreamToken>,
    /// The whole text, on the last event only.
    pub generated_text: Option<String>,
    /// On the last event only.
    pub details: Option<GenerateDetails>,
}

/// `GET /info`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Info {
    pub model_id: String,
    pub model_dtype: String,
    pub model_device_type: &'static str,
    pub router: &'static str,
    pub version: &'static str,
    pub max_concurrent_requests: usize,
    pub max_best_of: usize,
    pub max_stop_sequences: usize,
    pub max_input_tokens: usize,
    pub max_total_tokens: usize,
    pub max_batch_prefill_tokens: usize,
    pub max_batch_size: usize,
    pub block_size: usize,
    pub num_kv_blocks: usize,
}

/// `POST /tokenize`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    pub inputs: String,
    /// Which model runs it, on a server of several models (`kestrel serve --model NAME=PATH
    /// ...`); a server of one model ignores it.
    pub model: Option<String>,
    /// Add the model's special tokens (BOS) as generation would (default true).
    pub add_special_tokens: Option<bool>,
}

/// One token of a tokenized input. `text` is the token decoded on its own; `start`/`stop` are
/// byte offsets into the concatenation of those texts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SimpleToken {
    pub id: u32,
    pub text: String,
    pub start: usize,
    pub stop: usize,
}

/// The body of every TGI-route error.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TgiErrorBody {
    pub error: String,
    pub error_type: String,
    /// The request's id (as in the `X-Request-Id` response header), to quote in reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}
