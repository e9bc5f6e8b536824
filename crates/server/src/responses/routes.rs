//! The Responses handlers: `POST /v1/responses` (create, whole or streamed),
//! `GET /v1/responses/{id}` and `DELETE /v1/responses/{id}` (stored responses).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use serde_json::{json, Value};

use super::output::{item_id, Keep, ResponseContext};
use super::store::ResponseStore;
use super::stream::ResponsesEncoder;
use super::wire::{
    DeletedResponse, ResponseObject, ResponseSettings, ResponsesRequest, TextConfig, TextFormat,
};
use crate::error::{json_response, ApiError, OpenAiError};
use crate::extract::Wire;
use crate::openai::wire::ErrorBody;
use crate::reply_reader::Reply;
use crate::request_scope::RequestScope;
use crate::state::{unix_now, AppState};
use crate::submitted_choices::{respond, ChoiceOutput, SubmittedChoices};
use crate::validation::responses::{ResponsesCall, ValidResponses};
use crate::validation::validate_off_thread;

/// The route template, for the request log.
const ROUTE: &str = "/v1/responses";

/// Create a model response (OpenAI Responses).
#[utoipa::path(post, path = "/v1/responses", request_body = ResponsesRequest,
    responses((status = 200, description = "The response, or (with `stream`) an SSE stream of its events", body = ResponseObject),
              (status = 400, body = ErrorBody),
              (status = 404, description = "Unknown model, or unknown `previous_response_id`", body = ErrorBody),
              (status = 429, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(store): Extension<Arc<ResponseStore>>,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<ResponsesRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let arrival = Instant::now();
    let scope = scope?;
    let Wire(request) = body?;
    let history = match request.previous_response_id.as_deref() {
        None => Vec::new(),
        Some(id) => {
            let previous = store.get(id).ok_or_else(|| ApiError::ResponseNotFound {
                id: id.to_string(),
                param: Some("previous_response_id"),
            })?;
            previous.conversation.clone()
        }
    };
    let settings = settings(&request);
    let call = ResponsesCall { request, history };
    let ValidResponses {
        valid,
        conversation,
        namespaces,
    } = validate_off_thread(&state, call, arrival).await?;
    let valid = valid.with_default_ttft_slo(scope.ttft_slo);
    let submitted = SubmittedChoices::submit_valid(&state, ROUTE, &valid, &scope).await?;
    let keep = settings.store.then(|| Keep {
        store: store.clone(),
        conversation,
    });
    let cx = ResponseContext {
        id: item_id("resp"),
        created_at: unix_now(),
        model: valid
            .adapter
            .clone()
            .unwrap_or_else(|| state.model().model_id.clone()),
        settings,
        tools: valid.tools.clone(),
        reasoning: valid.reasoning,
        keep,
        namespaces,
    };
    if valid.stream {
        return Ok(submitted.into_sse(ResponsesEncoder::new(cx)));
    }
    let (tally, outputs) = submitted.collect().await;
    let usage = tally.usage();
    let result = outputs.and_then(|outputs| {
        let output = outputs.into_iter().next().ok_or_else(|| {
            ApiError::Internal("the engine ended the request without a result".into())
        })?;
        let response = whole(&cx, output, usage);
        cx.remember(&response);
        Ok(json_response(StatusCode::OK, &response))
    });
    Ok(respond::<OpenAiError>(tally, result))
}

/// Retrieve a stored response.
#[utoipa::path(get, path = "/v1/responses/{id}",
    params(("id" = String, Path, description = "The response's id (`resp_...`)")),
    responses((status = 200, description = "The stored response", body = ResponseObject),
              (status = 400, description = "The id is not a valid path segment", body = ErrorBody),
              (status = 404, description = "No stored response has this id (never stored, `store: false`, deleted, evicted or expired)", body = ErrorBody)))]
pub async fn retrieve(
    Extension(store): Extension<Arc<ResponseStore>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, OpenAiError> {
    let id = response_id(id)?;
    let stored = store
        .get(&id)
        .ok_or(ApiError::ResponseNotFound { id, param: None })?;
    Ok(json_response(StatusCode::OK, &stored.response))
}

/// Delete a stored response.
#[utoipa::path(delete, path = "/v1/responses/{id}",
    params(("id" = String, Path, description = "The response's id (`resp_...`)")),
    responses((status = 200, description = "The response was deleted", body = DeletedResponse),
              (status = 400, description = "The id is not a valid path segment", body = ErrorBody),
              (status = 404, description = "No stored response has this id", body = ErrorBody)))]
pub async fn delete(
    Extension(store): Extension<Arc<ResponseStore>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, OpenAiError> {
    let id = response_id(id)?;
    if !store.remove(&id) {
        return Err(ApiError::ResponseNotFound { id, param: None }.into());
    }
    let body = DeletedResponse {
        id,
        object: "response",
        deleted: true,
    };
    Ok(json_response(StatusCode::OK, &body))
}

fn response_id(id: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    id.map(|Path(id)| id)
        .map_err(|e| ApiError::param("id", format!("bad response id: {e}")))
}

/// The response of a whole reply.
fn whole(
    cx: &ResponseContext,
    o: ChoiceOutput,
    usage: kestrel_engine::api::Usage,
) -> ResponseObject {
    let token_bytes: usize = o.tokens.iter().map(|t| t.text.len()).sum();
    let tail = o.text.get(token_bytes..).unwrap_or_default();
    let reply = Reply::read(cx.reasoning, cx.tools.as_ref(), &o.tokens, tail);
    let reasoning_tokens = reply.reasoning_tokens;
    let output = cx.reply_items(reply, o.reason);
    cx.finished(output, o.reason, usage, reasoning_tokens)
}

/// The request's settings as the response echoes them (OpenAI's defaults where absent).
fn settings(r: &ResponsesRequest) -> ResponseSettings {
    let text = r.text.clone().unwrap_or_default();
    let text = TextConfig {
        format: Some(text.format.unwrap_or(TextFormat {
            kind: "text".into(),
            name: None,
            description: None,
            schema: None,
            strict: None,
        })),
        ..text
    };
    ResponseSettings {
        instructions: r.instructions.clone(),
        metadata: r.metadata.clone().unwrap_or_default(),
        temperature: r.temperature.unwrap_or(1.0),
        top_p: r.top_p.unwrap_or(1.0),
        tools: r.tools.clone().unwrap_or_default(),
        tool_choice: r.tool_choice.clone().unwrap_or_else(|| json!("auto")),
        parallel_tool_calls: r.parallel_tool_calls.unwrap_or(true),
        max_output_tokens: r.max_output_tokens,
        max_tool_calls: r.max_tool_calls,
        previous_response_id: r.previous_response_id.clone(),
        store: r.store.unwrap_or(true),
        background: false,
        text,
        reasoning: r
            .reasoning
            .clone()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({"effort": null, "summary": null})),
        truncation: r.truncation.clone().unwrap_or_else(|| "disabled".into()),
        user: r.user.clone(),
        prompt_cache_key: r.prompt_cache_key.clone(),
        safety_identifier: r.safety_identifier.clone(),
        service_tier: "default".into(),
        top_logprobs: r.top_logprobs.unwrap_or(0),
    }
}
