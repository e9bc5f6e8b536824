//! `GET /openapi.json`: the OpenAPI document of every route, generated from the handlers'
//! annotations and the wire types' schemas.

use axum::http::StatusCode;
use axum::response::Response;
use utoipa::OpenApi;

use super::openapi_errors::ErrorResponses;
use crate::error::json_response;

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Kestrel",
        description = "OpenAI- and TGI-compatible LLM inference server"
    ),
    paths(
        super::openai::completions,
        super::openai::chat_completions,
        super::openai::models,
        super::embeddings::embeddings,
        super::tgi::generate,
        super::tgi::generate_stream,
        super::tgi::compat_generate,
        super::tgi::info,
        super::tgi::tokenize,
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

/// This document.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn openapi_json() -> Response {
    json_response(StatusCode::OK, &ApiDoc::openapi())
}
