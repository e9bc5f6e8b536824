//! The [`router`]: the API families' handlers ([`crate::openai`], [`crate::responses`],
//! [`crate::tgi`]) and the routes every family shares (health, metrics, LoRA, the OpenAPI
//! document, the playground), assembled with authentication, request counting, logging, body
//! limit and CORS; the Responses store travels as a request extension.
//!
//! ```text
//! request ─► request_id ─► CORS (opt-in) ─► log_requests ─► trace_requests (with
//!          --otlp-traces-endpoint) ─► [route matched] ─► count_requests
//!          ─► auth* ─► handler                  * every route but /health*, /metrics and
//!                                                 the playground (GET /, /playground/*)
//! (unmatched paths get an OpenAI-shaped 404, a known path with another method an OpenAI-shaped
//!  405 with `Allow` — Anthropic-shaped under `/v1/messages`; every response carries
//!  `X-Request-Id`)
//! (429 and 503 responses get a computed `Retry-After` on the way out)
//! ```

pub mod health;
pub mod lora;
pub mod metrics;
pub mod openapi;
mod openapi_errors;
pub mod playground;

// The API families' handlers, under the names the OpenAPI document was first built with: utoipa
// tags each path with the module path written in `paths(...)` (`super::openai`, `super::tgi`,
// `super::embeddings`), so these names keep `/openapi.json` unchanged.
pub use crate::anthropic::routes as anthropic;
pub use crate::openai::detokenize;
pub use crate::openai::embeddings;
pub use crate::openai::routes as openai;
pub use crate::responses::routes as responses;
pub use crate::tgi::routes as tgi;

use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::auth::{require_api_key, ApiKey};
use crate::config::ServerConfig;
use crate::extract::{ApiPolicy, BodyLimit, BodyTimeout};
use crate::state::AppState;

/// All routes with their middleware.
pub fn router(config: &ServerConfig, state: AppState) -> Router {
    let mut protected = Router::new()
        .route("/v1/completions", post(openai::completions))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/models", get(openai::models))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/", post(tgi::compat_generate))
        .route("/generate", post(tgi::generate))
        .route("/generate_stream", post(tgi::generate_stream))
        .route("/info", get(tgi::info))
        .route("/tokenize", post(tgi::tokenize))
        .route("/detokenize", post(detokenize::detokenize))
        .route("/openapi.json", get(openapi::openapi_json));
    protected = if config.enable_runtime_lora {
        protected
            .route("/v1/load_lora_adapter", post(lora::load))
            .route("/v1/unload_lora_adapter", post(lora::unload))
    } else {
        protected
            .route("/v1/load_lora_adapter", post(lora::disabled))
            .route("/v1/unload_lora_adapter", post(lora::disabled))
    };
    if !config.api_keys.is_empty() {
        protected = protected.route_layer(axum::middleware::from_fn_with_state(
            ApiKey::any_of(&config.api_keys).salting_the_cache(config.cache_salt_by_api_key),
            require_api_key,
        ));
    }
    let open = Router::new()
        .route("/health", get(health::health))
        .route("/health/ready", get(health::health))
        .route("/health/live", get(health::live))
        .route("/metrics", get(metrics::metrics))
        .merge(playground::routes());
    let mut app = protected
        .merge(open)
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .route_layer(axum::middleware::from_fn(crate::metrics::count_requests))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::retry_after::set_retry_after,
        ))
        .layer(axum::middleware::from_fn(crate::otel::trace_requests))
        .layer(axum::middleware::from_fn(crate::request_log::log_requests))
        .layer(axum::Extension(BodyLimit(config.body_limit)))
        .layer(axum::Extension(BodyTimeout(config.body_read_timeout)))
        .layer(axum::Extension(ApiPolicy {
            strict: config.strict_api,
        }))
        .layer(axum::Extension(config.response_store.clone()))
        .with_state(state);
    if let Some(cors) = crate::cors::layer(config) {
        app = app.layer(cors);
    }
    app.layer(axum::middleware::from_fn(crate::request_id::assign))
}

/// Any path no route serves.
async fn not_found(uri: axum::http::Uri) -> Response {
    let e = crate::error::ApiError::NotFound(format!("no route for {}", uri.path()));
    error_for_path(uri.path(), e)
}

/// A path some route serves, with a method it does not take (axum adds the `Allow` header).
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let e = crate::error::ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    };
    error_for_path(uri.path(), e)
}

/// `e` as the route at `path` renders errors outside its handler: in Anthropic's shape under
/// the Messages routes, else in OpenAI's (the fleet gateway's dispatch answers the same way).
pub fn error_for_path(path: &str, e: crate::error::ApiError) -> Response {
    if crate::anthropic::owns_path(path) {
        crate::anthropic::error::AnthropicError(e).into_response()
    } else {
        crate::error::OpenAiError(e).into_response()
    }
}
