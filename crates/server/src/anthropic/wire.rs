//! Anthropic Messages request and response bodies (`POST /v1/messages`,
//! `POST /v1/messages/count_tokens`) and the error envelope: data only, serde and OpenAPI
//! schemas. [`super::convert`] reads a request into a [`crate::validation::chat_call::ChatCall`].
//!
//! Content blocks are kept as JSON values on the request side and read one by one in
//! [`super::convert`], so that a bad block gets a 400 naming its position and type rather than
//! serde's "did not match any variant"; their schema ([`InputBlock`]) is still published.
//! Numeric fields are wide signed types so that out-of-range values reach validation, which
//! names the parameter.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::{RefOr, Schema};
use utoipa::ToSchema;

/// `POST /v1/messages`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct MessagesRequest {
    /// The served model's id or a LoRA adapter's name (Anthropic requires it; absent here: the
    /// base model).
    pub model: Option<String>,
    /// The conversation: `user` and `assistant` turns.
    pub messages: Vec<InputMessage>,
    /// Instructions before the conversation: a string or text blocks.
    pub system: Option<BlockContent>,
    /// Most tokens to generate (required). A value beyond what the context leaves is cut down
    /// to fit (clients send their model's output limit).
    pub max_tokens: Option<i64>,
    /// Strings that end generation; the one that did is the response's `stop_sequence`.
    pub stop_sequences: Option<Vec<String>>,
    /// Stream the reply as server-sent events.
    pub stream: Option<bool>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Keep only the `top_k` most likely tokens.
    pub top_k: Option<i64>,
    /// Custom tools (`name`, `description`, `input_schema`); server tools (a `type` other than
    /// `custom`) are refused.
    #[schema(value_type = Option<Vec<Tool>>)]
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<ToolChoiceIn>,
    pub thinking: Option<ThinkingConfig>,
    /// Extension (vLLM's, as on chat completions): extra variables for the chat template;
    /// `thinking` sets `enable_thinking` over them.
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// Extension (vLLM's, as on chat completions): a grammar in llguidance's Lark syntax the
    /// whole reply follows (constrained decoding; one that does not compile is a 400 `invalid_request_error`).
    pub guided_grammar: Option<String>,
    /// Accepted and ignored.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// Accepted and ignored (the prefix cache needs no hints).
    #[schema(value_type = Option<Object>)]
    pub cache_control: Option<Value>,
    /// Accepted and ignored.
    pub service_tier: Option<String>,
}

/// `POST /v1/messages/count_tokens`: the prompt parts of [`MessagesRequest`].
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CountTokensRequest {
    pub model: Option<String>,
    pub messages: Vec<InputMessage>,
    pub system: Option<BlockContent>,
    #[schema(value_type = Option<Vec<Tool>>)]
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<ToolChoiceIn>,
    pub thinking: Option<ThinkingConfig>,
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// Accepted and ignored.
    #[schema(value_type = Option<Object>)]
    pub cache_control: Option<Value>,
}

/// One turn of the conversation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct InputMessage {
    /// `user` or `assistant`.
    pub role: String,
    pub content: BlockContent,
}

/// A turn's content, or `system`: a string or content blocks (only text blocks in `system`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum BlockContent {
    Text(String),
    Blocks(Vec<RawBlock>),
}

/// A content block as sent: read block by block in [`super::convert`], documented as
/// [`InputBlock`].
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct RawBlock(pub Value);

impl utoipa::PartialSchema for RawBlock {
    fn schema() -> RefOr<Schema> {
        <InputBlock as utoipa::PartialSchema>::schema()
    }
}

impl ToSchema for RawBlock {
    fn name() -> Cow<'static, str> {
        InputBlock::name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        InputBlock::schemas(schemas);
    }
}

/// A content block of a request. `cache_control` is accepted on every block and ignored
/// (Kestrel's prefix cache needs no hints); `image` and `document` blocks are refused with a
/// 400 naming the type.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputBlock {
    Text {
        text: String,
    },
    /// An assistant turn's call.
    ToolUse {
        id: String,
        name: String,
        #[schema(value_type = Object)]
        input: Value,
    },
    /// A user turn's answer to a call: a string or text blocks.
    ToolResult {
        tool_use_id: String,
        #[schema(value_type = Option<Object>)]
        content: Option<Value>,
        /// The call failed: the template sees the content prefixed with `Error: `.
        is_error: Option<bool>,
    },
    /// An assistant turn's reasoning: accepted and left out of the prompt.
    Thinking {
        thinking: String,
        signature: Option<String>,
    },
    /// Accepted and left out of the prompt.
    RedactedThinking {
        data: Option<String>,
    },
    /// Refused (text-only models).
    Image {
        #[schema(value_type = Option<Object>)]
        source: Option<Value>,
    },
    /// Refused (text-only models).
    Document {
        #[schema(value_type = Option<Object>)]
        source: Option<Value>,
    },
}

/// A custom tool.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// The JSON schema of the tool's `input`.
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
    /// Absent or `custom`; any other type (a server tool) is refused.
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// `tool_choice`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ToolChoiceIn {
    /// `auto`, `any` (some tool must be called), `tool` (the tool `name`) or `none`.
    #[serde(rename = "type")]
    pub kind: String,
    /// With `type: tool`.
    pub name: Option<String>,
    /// At most one call (with `auto`, `any` and `tool`).
    pub disable_parallel_tool_use: Option<bool>,
}

/// `thinking`: `{"type": "enabled", "budget_tokens": N}` or `{"type": "disabled"}`; sets the
/// chat template's `enable_thinking` where the template reads it. The budget is not enforced.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ThinkingConfig {
    #[serde(rename = "type")]
    pub kind: String,
    pub budget_tokens: Option<i64>,
}

/// `POST /v1/messages` response (and, with empty `content`, the `message_start` event's
/// message).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageResponse {
    /// `msg_<hex>`.
    pub id: String,
    /// `message`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `assistant`.
    pub role: &'static str,
    pub model: String,
    pub content: Vec<OutputBlock>,
    /// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use`; null in `message_start`.
    pub stop_reason: Option<&'static str>,
    /// The stop sequence that ended generation, if one did.
    pub stop_sequence: Option<String>,
    pub usage: MessageUsage,
}

/// A content block of a response.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputBlock {
    /// The model's reasoning (with `--reasoning-parser`, or a template that shows one);
    /// `signature` is empty.
    Thinking {
        thinking: String,
        signature: String,
    },
    Text {
        text: String,
    },
    ToolUse {
        /// `toolu_<hex>`.
        id: String,
        name: String,
        #[schema(value_type = Object)]
        input: Value,
    },
}

/// Token usage, in Anthropic's terms: `input_tokens` are the prompt tokens *not* read from the
/// prefix cache, `cache_read_input_tokens` those that were (their sum is the prompt);
/// `cache_creation_input_tokens` is always 0.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct MessageUsage {
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub cache_creation_input_tokens: usize,
    pub cache_read_input_tokens: usize,
}

/// `POST /v1/messages/count_tokens` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CountTokensResponse {
    /// Tokens of the rendered prompt (system, messages and tools through the chat template).
    pub input_tokens: usize,
}

/// Anthropic's error envelope.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AnthropicErrorBody {
    /// `error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: AnthropicErrorDetail,
}

/// The error itself.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AnthropicErrorDetail {
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `request_too_large`, `rate_limit_error`, `api_error` or `overloaded_error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}
