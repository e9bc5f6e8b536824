//! `GET /openapi.json`: the OpenAPI document of every route, generated from the handlers'
//! annotations and the wire types' schemas, with the parameter ranges validation enforces
//! ([`crate::validation::param_ranges`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use utoipa::OpenApi;

use super::openapi_errors::ErrorResponses;
use crate::error::json_response;
use crate::state::AppState;

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Kestrel",
        description = "OpenAI-, Anthropic- and TGI-compatible LLM inference server"
    ),
    paths(
        super::openai::completions,
        super::openai::chat_completions,
        super::openai::models,
        super::embeddings::embeddings,
        super::anthropic::messages,
        super::anthropic::count_tokens,
        super::responses::create,
        super::responses::retrieve,
        super::responses::delete,
        super::tgi::generate,
        super::tgi::generate_stream,
        super::tgi::compat_generate,
        super::tgi::info,
        super::tgi::tokenize,
        super::detokenize::detokenize,
        super::lora::load,
        super::lora::unload,
        super::health::health,
        super::health::live,
        super::metrics::metrics,
        openapi_json,
    ),
    modifiers(&ErrorResponses)
)]
pub struct ApiDoc;

/// The document as served by a server whose `--min-client-priority` is `min_client_priority`:
/// [`ApiDoc`] with the numeric ranges and size limits of the request parameters.
pub fn document(min_client_priority: i32) -> serde_json::Value {
    let mut doc = match serde_json::to_value(ApiDoc::openapi()) {
        Ok(doc) => doc,
        Err(e) => {
            tracing::error!(error = %e, "cannot serialize the OpenAPI document");
            return serde_json::Value::Null;
        }
    };
    let missing = crate::validation::param_ranges::annotate(&mut doc, min_client_priority);
    if !missing.is_empty() {
        tracing::error!(?missing, "parameter ranges without a schema property");
    }
    doc
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn openapi_json(State(state): State<AppState>) -> Response {
    let document = document(state.limits().min_client_priority);
    json_response(StatusCode::OK, &document)
}
