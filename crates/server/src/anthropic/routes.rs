//! Anthropic Messages routes: `POST /v1/messages` and `POST /v1/messages/count_tokens`.
//!
//! ```text
//! Wire<MessagesRequest> ─► validate (blocking pool: ChatCall, as chat completions)
//!                       ─► SubmittedChoices::submit ─► admitted
//!                       ─► stream: MessagesEncoder  |  collect ─► MessageContext::message
//! ```
//!
//! Every error, from the body extractor on, is rendered in Anthropic's shape
//! ([`AnthropicError`]). `anthropic-version` and `anthropic-beta` headers are accepted and
//! ignored.

use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::AnthropicError;
use super::message::MessageContext;
use super::stream::MessagesEncoder;
use super::wire::{
    AnthropicErrorBody, CountTokensRequest, CountTokensResponse, MessageResponse, MessagesRequest,
};
use crate::error::{json_response, ApiError};
use crate::extract::Wire;
use crate::request_scope::RequestScope;
use crate::state::AppState;
use crate::submitted_choices::{respond, SubmittedChoices};
use crate::validation;

/// The route template (for the request log).
const ROUTE: &str = "/v1/messages";

/// Create a message (the model's chat template applied to `system` and `messages`).
#[utoipa::path(post, path = "/v1/messages", request_body = MessagesRequest,
    responses((status = 200, description = "The message, or a stream of Anthropic's named events", body = MessageResponse),
              (status = 400, body = AnthropicErrorBody), (status = 529, description = "Overloaded: the engine's queue is full", body = AnthropicErrorBody)))]
pub async fn messages(
    State(state): State<AppState>,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<MessagesRequest>, ApiError>,
) -> Result<Response, AnthropicError> {
    let arrival = Instant::now();
    let scope = scope?;
    let Wire(req) = body?;
    let valid = validation::validate_off_thread(&state, req, arrival)
        .await?
        .with_default_ttft_slo(scope.ttft_slo);
    let submitted = SubmittedChoices::submit_valid(&state, ROUTE, &valid, &scope).await?;
    let model = valid
        .adapter
        .clone()
        .unwrap_or_else(|| state.model().model_id.clone());
    let cx = MessageContext::new(&valid, model);
    if valid.stream {
        return Ok(submitted.into_sse(MessagesEncoder::new(cx)));
    }
    let (tally, outputs) = submitted.collect().await;
    let result = outputs.and_then(|outputs| match outputs.first() {
        Some(output) => Ok(json_response(StatusCode::OK, &cx.message(output))),
        None => Err(ApiError::Internal("the request produced no reply".into())),
    });
    Ok(respond::<AnthropicError>(tally, result))
}

/// Count the tokens of a message's prompt (system, messages and tools through the chat
/// template), as a create with the same body would run it.
#[utoipa::path(post, path = "/v1/messages/count_tokens", request_body = CountTokensRequest,
    responses((status = 200, body = CountTokensResponse),
              (status = 400, body = AnthropicErrorBody)))]
pub async fn count_tokens(
    State(state): State<AppState>,
    body: Result<Wire<CountTokensRequest>, ApiError>,
) -> Result<Response, AnthropicError> {
    let Wire(req) = body?;
    let valid = validation::validate_off_thread(&state, req, Instant::now()).await?;
    let body = CountTokensResponse {
        input_tokens: valid.prompt_tokens(),
    };
    Ok(json_response(StatusCode::OK, &body))
}
