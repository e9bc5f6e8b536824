//! Text Generation Inference-compatible routes: `POST /generate`, `POST /generate_stream`,
//! `POST /` (either, by the body's `stream` field, as TGI answers it), `GET /info`,
//! `POST /tokenize`.
//!
//! The generation routes share the OpenAI routes' core: validation on the blocking pool,
//! [`SubmittedChoices`] (submit, collect or stream, usage, the log line); [`crate::tgi::stream`]
//! shapes their output.

use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use crate::blocking;
use crate::error::{json_response, ApiError, TgiError};
use crate::extract::Wire;
use crate::request_scope::RequestScope;
use crate::state::{AppState, MAX_STOP_SEQUENCES};
use crate::submitted_choices::{respond, SubmittedChoices};
use crate::tgi::stream::{details, full_text, TgiEncoder};
use crate::tgi::wire::{
    GenerateRequest, GenerateResponse, Info, SimpleToken, StreamResponse, TgiErrorBody,
    TokenizeRequest,
};
use crate::validation::{self, ValidGenerate};

/// Validates a generate request and submits it.
async fn start(
    state: &AppState,
    route: &'static str,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<GenerateRequest>, ApiError>,
) -> Result<(ValidGenerate, SubmittedChoices), ApiError> {
    let arrival = Instant::now();
    let scope = scope?;
    let Wire(req) = body?;
    let valid = validation::validate_off_thread(state, req, arrival)
        .await?
        .with_default_ttft_slo(scope.ttft_slo);
    let prompt_tokens = valid.request.prompt_ids().len();
    let request = scope.apply(valid.request.clone());
    let submitted = SubmittedChoices::submit(state, route, prompt_tokens, [request])?
        .admitted()
        .await?;
    Ok((valid, submitted))
}

/// Generate text (one response when done).
#[utoipa::path(post, path = "/generate", request_body = GenerateRequest,
    responses((status = 200, body = GenerateResponse), (status = 422, body = TgiErrorBody),
              (status = 429, body = TgiErrorBody)))]
pub async fn generate(
    State(state): State<AppState>,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<GenerateRequest>, ApiError>,
) -> Result<Response, TgiError> {
    let (valid, submitted) = start(&state, "/generate", scope, body).await?;
    let (tally, outputs) = submitted.collect().await;
    let result = outputs
        .and_then(|mut o| {
            o.pop()
                .ok_or_else(|| ApiError::Internal("no output".into()))
        })
        .map(|out| {
            let body = GenerateResponse {
                details: valid
                    .details
                    .then(|| details(&valid, out.reason, out.usage.completion_tokens)),
                generated_text: full_text(&valid, out.text),
            };
            json_response(StatusCode::OK, &body)
        });
    Ok(respond::<TgiError>(tally, result))
}

/// Generate text as server-sent events, one per token; the last carries the whole text.
#[utoipa::path(post, path = "/generate_stream", request_body = GenerateRequest,
    responses((status = 200, description = "SSE stream", body = StreamResponse),
              (status = 422, body = TgiErrorBody), (status = 429, body = TgiErrorBody)))]
pub async fn generate_stream(
    State(state): State<AppState>,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<GenerateRequest>, ApiError>,
) -> Result<Response, TgiError> {
    let (valid, submitted) = start(&state, "/generate_stream", scope, body).await?;
    Ok(submitted.into_sse(TgiEncoder::new(state, valid)))
}

/// TGI's root route: a generate request that streams when its `stream` field is true
/// (clients such as `huggingface_hub.InferenceClient` post here when given the server's URL).
#[utoipa::path(post, path = "/", request_body = GenerateRequest,
    responses((status = 200, body = GenerateResponse), (status = 422, body = TgiErrorBody),
              (status = 429, body = TgiErrorBody)))]
pub async fn compat_generate(
    State(state): State<AppState>,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<GenerateRequest>, ApiError>,
) -> Result<Response, TgiError> {
    let streams = matches!(&body, Ok(Wire(req)) if req.stream == Some(true));
    if streams {
        generate_stream(State(state), scope, body).await
    } else {
        generate(State(state), scope, body).await
    }
}

/// Server and model limits.
#[utoipa::path(get, path = "/info", responses((status = 200, body = Info)))]
pub async fn info(State(state): State<AppState>) -> Response {
    let capacity = state.backend().capacity();
    let limits = state.limits();
    let body = Info {
        model_id: state.model().model_id.clone(),
        model_dtype: state.model().dtype.clone(),
        model_device_type: "cpu",
        router: "kestrel",
        version: env!("CARGO_PKG_VERSION"),
        max_concurrent_requests: capacity.max_concurrent_requests.unwrap_or(usize::MAX),
        max_best_of: 1,
        max_stop_sequences: MAX_STOP_SEQUENCES,
        max_input_tokens: limits.max_input_tokens,
        max_total_tokens: limits.max_total_tokens,
        max_batch_prefill_tokens: capacity.max_num_batched_tokens,
        max_batch_size: capacity.max_num_seqs,
        block_size: capacity.block_size,
        num_kv_blocks: capacity.num_kv_blocks,
    };
    json_response(StatusCode::OK, &body)
}

/// Tokenize text as generation would (on the blocking pool, like validation).
#[utoipa::path(post, path = "/tokenize", request_body = TokenizeRequest,
    responses((status = 200, body = Vec<SimpleToken>), (status = 422, body = TgiErrorBody)))]
pub async fn tokenize(
    State(state): State<AppState>,
    body: Result<Wire<TokenizeRequest>, ApiError>,
) -> Result<Response, TgiError> {
    let Wire(req) = body?;
    state
        .limits()
        .check_input_bytes("inputs", req.inputs.len())?;
    let tokens = blocking::run(move || simple_tokens(&state, &req)).await?;
    Ok(json_response(StatusCode::OK, &tokens))
}

/// `req.inputs` as tokens with their text and byte spans.
fn simple_tokens(state: &AppState, req: &TokenizeRequest) -> Result<Vec<SimpleToken>, ApiError> {
    let tok = state.tokenizer();
    let ids = tok
        .encode(&req.inputs, req.add_special_tokens.unwrap_or(true))
        .map_err(|e| ApiError::param("inputs", format!("cannot tokenize: {e}")))?;
    let mut start = 0;
    let tokens = ids
        .iter()
        .map(|&id| {
            let text = tok.decode(&[id], false);
            let token = SimpleToken {
                id,
                start,
                stop: start + text.len(),
                text,
            };
            start = token.stop;
            token
        })
        .collect();
    Ok(tokens)
}
