//! `/v1/embeddings` request and response bodies (OpenAI's shape).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The `input` of an embedding request: text or token ids, alone or as a list.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Tokens(Vec<u32>),
    TextList(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct EmbeddingRequest {
    /// The served model's id (absent: the served model).
    pub model: Option<String>,
    pub input: EmbeddingInput,
    /// `float` (default) or `base64` (little-endian f32 bytes).
    pub encoding_format: Option<String>,
    /// Accepted only when equal to the model's hidden size.
    pub dimensions: Option<i64>,
    /// Accepted and ignored.
    pub user: Option<String>,
}

/// One vector: numbers, or base64 of its little-endian f32 bytes.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    Base64(String),
}

/// One input's embedding.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EmbeddingData {
    pub object: &'static str,
    pub index: usize,
    pub embedding: EmbeddingVector,
}

/// Token counts of an embedding request.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

/// `/v1/embeddings` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EmbeddingResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub data: Vec<EmbeddingData>,
    pub usage: EmbeddingUsage,
}
