//! OpenAI Responses request and response bodies (data only: serde and OpenAPI schemas). The
//! input items are in [`super::items`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::items::ResponseInput;

/// `POST /v1/responses`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ResponsesRequest {
    /// The served model's id or a LoRA adapter's name (absent: the base model).
    pub model: Option<String>,
    /// A user message as text, or a list of input items (required).
    pub input: Option<ResponseInput>,
    /// A system message put first; not carried over by `previous_response_id`.
    pub instructions: Option<String>,
    /// Tools the model may call. `{"type": "function", "name", "description", "parameters",
    /// "strict"}` are offered to the model; tools of other types (`web_search`, `file_search`,
    /// `local_shell`, `custom`, `mcp`, ...) are ignored: the model neither sees nor calls them.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `"none"`, `"auto"` (calls parsed from the model's own format), `"required"` or
    /// `{"type": "function", "name": ..}` (forced with structured output).
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    /// With a forced call: whether several calls may be made (default true).
    pub parallel_tool_calls: Option<bool>,
    /// Most tokens to generate (default: what the context leaves).
    pub max_output_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", ..}}`: structured output.
    pub text: Option<TextConfig>,
    /// Extension (vLLM's, as on chat completions): a grammar in llguidance's Lark syntax the
    /// whole reply follows; not together with a `text.format` constraint (400).
    pub guided_grammar: Option<String>,
    /// Up to 16 string pairs, echoed in the response.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// Accepted and echoed.
    pub user: Option<String>,
    /// Keep the response for `GET /v1/responses/{id}` and `previous_response_id` (default
    /// true).
    pub store: Option<bool>,
    /// Continue the conversation of this stored response (its `instructions` excepted).
    pub previous_response_id: Option<String>,
    /// Stream the response as server-sent events.
    pub stream: Option<bool>,
    /// Accepted and ignored.
    #[schema(value_type = Option<Object>)]
    pub stream_options: Option<Value>,
    /// `{"effort", "summary"}`: accepted and echoed (the model reasons as its template says).
    #[schema(value_type = Option<Object>)]
    pub reasoning: Option<Value>,
    /// Accepted and ignored (reasoning text is always included in reasoning items).
    pub include: Option<Vec<String>>,
    /// `"auto"` or `"disabled"`: accepted; a conversation longer than the context is refused
    /// either way.
    pub truncation: Option<String>,
    /// Accepted and echoed (the prefix cache is automatic).
    pub prompt_cache_key: Option<String>,
    /// Accepted and ignored.
    pub prompt_cache_retention: Option<String>,
    /// Accepted and echoed.
    pub safety_identifier: Option<String>,
    /// Accepted and ignored.
    pub service_tier: Option<String>,
    /// Accepted and ignored.
    pub top_logprobs: Option<i64>,
    /// Accepted and echoed.
    pub max_tool_calls: Option<i64>,
    /// Only `false`: background responses are not supported (400).
    pub background: Option<bool>,
    /// Accepted and ignored (Codex sends its turn metadata here).
    #[schema(value_type = Option<Object>)]
    pub client_metadata: Option<Value>,
    /// Not supported (400): use `previous_response_id`.
    #[schema(value_type = Option<Object>)]
    pub conversation: Option<Value>,
    /// Not supported (400): stored prompt templates.
    #[schema(value_type = Option<Object>)]
    pub prompt: Option<Value>,
}

/// `text`: how the output is formatted.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
pub struct TextConfig {
    pub format: Option<TextFormat>,
    /// Accepted and echoed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<String>,
}

/// `text.format`: `{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema",
/// "name", "schema", "strict"}` (the output follows the schema).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct TextFormat {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A response (`object: "response"`), as created, streamed (`response.created`, ...,
/// `response.completed`), stored and retrieved.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ResponseObject {
    /// `resp_<32 hex digits>`.
    pub id: String,
    pub object: &'static str,
    /// Unix seconds.
    pub created_at: u64,
    /// `in_progress` (streamed events before the end), `completed`, `incomplete` or `failed`.
    pub status: &'static str,
    /// Why an `incomplete` response stopped.
    pub incomplete_details: Option<IncompleteDetails>,
    /// What failed, for a `failed` response.
    pub error: Option<ResponseError>,
    pub model: String,
    pub output: Vec<OutputItem>,
    /// `null` until the response ends.
    pub usage: Option<ResponseUsage>,
    #[serde(flatten)]
    pub settings: ResponseSettings,
}

/// The request's settings, echoed in the response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ResponseSettings {
    pub instructions: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    pub temperature: f64,
    pub top_p: f64,
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    /// As sent (a string or an object); `"auto"` when absent.
    pub tool_choice: Value,
    pub parallel_tool_calls: bool,
    pub max_output_tokens: Option<i64>,
    pub max_tool_calls: Option<i64>,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub background: bool,
    pub text: TextConfig,
    /// As sent; `{"effort": null, "summary": null}` when absent.
    pub reasoning: Value,
    pub truncation: String,
    pub user: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub safety_identifier: Option<String>,
    pub service_tier: String,
    pub top_logprobs: i64,
}

/// `incomplete_details`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct IncompleteDetails {
    /// `max_output_tokens`.
    pub reason: &'static str,
}

/// `error` of a failed response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ResponseError {
    /// `server_error` or `rate_limit_exceeded`.
    pub code: &'static str,
    pub message: String,
}

/// One output item.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// The model's reasoning (models whose reasoning is split out, see `--reasoning-parser`).
    Reasoning {
        /// `rs_<hex>`.
        id: String,
        /// Always empty: Kestrel does not summarize.
        #[schema(value_type = Vec<Object>)]
        summary: Vec<Value>,
        /// The reasoning text, as one `reasoning_text` part.
        content: Vec<ReasoningText>,
        status: &'static str,
    },
    /// The model's answer.
    Message {
        /// `msg_<hex>`.
        id: String,
        role: &'static str,
        /// `completed`, or `incomplete` when the output was cut short.
        status: &'static str,
        content: Vec<OutputText>,
    },
    /// A call of one of the request's function tools.
    FunctionCall {
        /// `fc_<hex>`.
        id: String,
        /// The id a `function_call_output` item answers.
        call_id: String,
        name: String,
        /// The arguments as JSON text.
        arguments: String,
        /// The `namespace` tool the function came in, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        status: &'static str,
    },
}

/// A `reasoning_text` part.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ReasoningText {
    /// `reasoning_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

/// An `output_text` part.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct OutputText {
    /// `output_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    /// Always empty.
    #[schema(value_type = Vec<Object>)]
    pub annotations: Vec<Value>,
}

impl OutputText {
    /// A part holding `text`.
    pub fn new(text: String) -> OutputText {
        OutputText {
            kind: "output_text",
            text,
            annotations: Vec::new(),
        }
    }
}

/// Token counts of a response.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct ResponseUsage {
    pub input_tokens: usize,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: usize,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: usize,
}

/// Breakdown of the input tokens.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct InputTokensDetails {
    /// Input tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// Breakdown of the output tokens.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct OutputTokensDetails {
    /// Tokens of the reasoning block (0 when the model's reasoning is not split out).
    pub reasoning_tokens: usize,
}

/// `DELETE /v1/responses/{id}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeletedResponse {
    pub id: String,
    pub object: &'static str,
    pub deleted: bool,
}

#[cfg(test)]
impl ResponseObject {
    /// A finished, empty response named `id` (unit tests of the store).
    pub fn test_value(id: &str) -> ResponseObject {
        ResponseObject {
            id: id.to_string(),
            object: "response",
            created_at: 0,
            status: "completed",
            incomplete_details: None,
            error: None,
            model: "m".into(),
            output: Vec::new(),
            usage: None,
            settings: ResponseSettings {
                instructions: None,
                metadata: Map::new(),
                temperature: 1.0,
                top_p: 1.0,
                tools: Vec::new(),
                tool_choice: Value::String("auto".into()),
                parallel_tool_calls: true,
                max_output_tokens: None,
                max_tool_calls: None,
                previous_response_id: None,
                store: true,
                background: false,
                text: TextConfig::default(),
                reasoning: Value::Null,
                truncation: "disabled".into(),
                user: None,
                prompt_cache_key: None,
                safety_identifier: None,
                service_tier: "default".into(),
                top_logprobs: 0,
            },
        }
    }
}
