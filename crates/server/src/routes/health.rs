//! `GET /health`: 200 while the backend can serve requests, 503 otherwise (the engine is
//! shutting down or gone; for a gateway, no worker is alive), with `Retry-After`.
//!
//! For an engine in this process the probe submits a one-token request and drops it at once
//! (which aborts it); a full engine (`Overloaded`) is alive and answers 200.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::json_response;
use crate::state::AppState;

/// Health status.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` or `unavailable`.
    pub status: &'static str,
    pub running: usize,
    pub waiting: usize,
    pub kv_cache_usage: f64,
}

/// Liveness of the backend.
#[utoipa::path(get, path = "/health", responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn health(State(state): State<AppState>) -> Response {
    let health = state.backend().health();
    let body = Health {
        status: if health.ready { "ok" } else { "unavailable" },
        running: health.running,
        waiting: health.waiting,
        kv_cache_usage: health.kv_usage,
    };
    if health.ready {
        return json_response(StatusCode::OK, &body);
    }
    let mut response = json_response(StatusCode::SERVICE_UNAVAILABLE, &body);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}
