//! `POST /v1/embeddings` (OpenAI's shape).
//!
//! Pooling, as vLLM does by default for decoder LMs: each input runs as one prompt (tokenized
//! like a completion prompt, with the special tokens the model adds) and its embedding is the last token's final hidden
//! state, after the model's final norm, L2-normalised. `dimensions` is accepted only when it
//! equals the hidden size (no truncation or projection). Inputs run one after another on the
//! engine thread, between generation steps, with KV blocks lent for each pass.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use crate::base64;
use crate::blocking;
use crate::error::{json_response, ApiError, OpenAiError};
use crate::extract::Wire;
use crate::openai::wire::embedding::{
    EmbeddingData, EmbeddingInput, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage,
    EmbeddingVector,
};
use crate::openai::wire::ErrorBody;
use crate::response_id::response_id;
use crate::state::{unix_now, AppState};

/// Most inputs one embedding request may carry.
const MAX_INPUTS: usize = 256;

/// Embeddings of text or token ids.
#[utoipa::path(post, path = "/v1/embeddings", request_body = EmbeddingRequest,
    responses((status = 200, body = EmbeddingResponse),
              (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn embeddings(
    State(state): State<AppState>,
    body: Result<Wire<EmbeddingRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let Wire(req) = body?;
    let model = state.model().model_id.clone();
    if let Some(m) = req.model.as_ref().filter(|m| **m != model) {
        return Err(ApiError::ModelNotFound(m.clone()).into());
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::param(
                "encoding_format",
                format!("encoding_format must be \"float\" or \"base64\", got {other:?}"),
            )
            .into())
        }
    };
    let worker = state.clone();
    let dimensions = req.dimensions;
    let vectors = blocking::run(move || embed_all(&worker, req.input, dimensions)).await?;
    let prompt_tokens = vectors.iter().map(|(n, _)| n).sum();
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, (_, v))| EmbeddingData {
            object: "embedding",
            index,
            embedding: if base64 {
                EmbeddingVector::Base64(base64::encode_f32(&v))
            } else {
                EmbeddingVector::Float(v)
            },
        })
        .collect();
    let body = EmbeddingResponse {
        id: response_id("embd"),
        object: "list",
        created: unix_now(),
        model,
        data,
        usage: EmbeddingUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    };
    Ok(json_response(StatusCode::OK, &body))
}

/// Tokenizes and embeds every input, in order: `(prompt tokens, unit vector)` each.
fn embed_all(
    state: &AppState,
    input: EmbeddingInput,
    dimensions: Option<i64>,
) -> Result<Vec<(usize, Vec<f32>)>, ApiError> {
    let encode = |text: &str| {
        state.limits().check_input_bytes("input", text.len())?;
        state
            .tokenizer()
            .encode(text, true)
            .map_err(|e| ApiError::param("input", format!("cannot tokenize: {e}")))
    };
    let prompts: Vec<Vec<u32>> = match input {
        EmbeddingInput::Text(t) => vec![encode(&t)?],
        EmbeddingInput::TextList(list) => {
            list.iter().map(|t| encode(t)).collect::<Result<_, _>>()?
        }
        EmbeddingInput::Tokens(ids) => vec![ids],
        EmbeddingInput::TokenLists(lists) => lists,
    };
    if prompts.is_empty() || prompts.len() > MAX_INPUTS {
        return Err(ApiError::param(
            "input",
            format!(
                "input must hold 1 to {MAX_INPUTS} items, got {}",
                prompts.len()
            ),
        ));
    }
    let limit = state.limits().max_input_tokens;
    let mut out = Vec::with_capacity(prompts.len());
    for ids in prompts {
        if ids.len() > limit {
            return Err(ApiError::TooLong(format!(
                "an input has {} tokens, more than the limit of {limit} input tokens",
                ids.len()
            )));
        }
        let n = ids.len();
        let v = l2_normalised(state.backend().embed(ids)?);
        if let Some(d) = dimensions.filter(|&d| d != v.len() as i64) {
            return Err(ApiError::param(
                "dimensions",
                format!(
                    "dimensions must equal the model's hidden size ({}), got {d}",
                    v.len()
                ),
            ));
        }
        out.push((n, v));
    }
    Ok(out)
}

/// `v / |v|` (a zero vector stays zero).
fn l2_normalised(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        v.iter_mut()
            .for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
    v
}
