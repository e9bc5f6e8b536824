//! `POST /detokenize` (vLLM's shape): token ids back to text, as generation would write them.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::blocking;
use crate::error::{json_response, ApiError, OpenAiError};
use crate::extract::Wire;
use crate::openai::wire::ErrorBody;
use crate::state::AppState;

/// `POST /detokenize`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    /// Accepted and ignored (the served model's tokenizer is used).
    pub model: Option<String>,
    /// Token ids of the served model's vocabulary.
    pub tokens: Vec<i64>,
}

/// The text of the tokens (special tokens included).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

/// Token ids to text.
#[utoipa::path(post, path = "/detokenize", request_body = DetokenizeRequest,
    responses((status = 200, body = DetokenizeResponse), (status = 400, body = ErrorBody)))]
pub async fn detokenize(
    State(state): State<AppState>,
    body: Result<Wire<DetokenizeRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let Wire(req) = body?;
    let ids = vocabulary_ids(&state, &req.tokens)?;
    let prompt = blocking::run(move || Ok(state.tokenizer().decode(&ids, false))).await?;
    Ok(json_response(
        StatusCode::OK,
        &DetokenizeResponse { prompt },
    ))
}

/// `tokens` as ids, each within the vocabulary and the longest context.
fn vocabulary_ids(state: &AppState, tokens: &[i64]) -> Result<Vec<u32>, ApiError> {
    let max = state.limits().max_total_tokens;
    if tokens.len() > max {
        return Err(ApiError::param(
            "tokens",
            format!(
                "{} tokens are more than the longest context ({max})",
                tokens.len()
            ),
        ));
    }
    let vocab = state.tokenizer().vocab_size();
    tokens
        .iter()
        .map(|&t| match u32::try_from(t) {
            Ok(id) if (id as usize) < vocab => Ok(id),
            _ => Err(ApiError::param(
                "tokens",
                format!("token id {t} is not in the vocabulary (0..{vocab})"),
            )),
        })
        .collect()
}
