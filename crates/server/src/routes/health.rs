//! Health probes.
//!
//! * `GET /health/live` — liveness: 200 as long as the HTTP server answers. Touches nothing
//!   else (no engine work, no lock), so probes cost nothing.
//! * `GET /health` (and `/health/ready`) — readiness: 200 while the backend can serve requests,
//!   503 otherwise (the engine is shutting down, gone or stuck; for a gateway, no worker is
//!   alive, or the process is draining to be restarted: see [`crate::heap_watch`]), with
//!   `Retry-After`. For an engine in this process the probe asks the engine
//!   thread for a heartbeat (answered between steps) and queues no request.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;

use crate::backend::BackendHealth;
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
    /// Problems an operator should know of (absent when there are none), e.g. a fleet worker
    /// the gateway refused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Liveness of the server process.
#[derive(Debug, Serialize, ToSchema)]
pub struct Liveness {
    /// Always `ok`.
    pub status: &'static str,
}

/// Liveness: the process answers HTTP.
#[utoipa::path(get, path = "/health/live", responses((status = 200, body = Liveness)))]
pub async fn live() -> Response {
    json_response(StatusCode::OK, &Liveness { status: "ok" })
}

/// Readiness of the backend.
#[utoipa::path(get, path = "/health", responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn health(State(state): State<AppState>) -> Response {
    let backend = state.backend().clone();
    let (health, notes) =
        tokio::task::spawn_blocking(move || (backend.health(), backend.health_notes()))
            .await
            .unwrap_or((
                BackendHealth {
                    ready: false,
                    running: 0,
                    waiting: 0,
                    kv_usage: 0.0,
                },
                Vec::new(),
            ));
    readiness(health, notes)
}

/// The readiness answer for `health`: 200, or 503 with `Retry-After` when the backend is not
/// ready or the process is draining to be restarted (the reason joins `notes`).
pub fn readiness(mut health: BackendHealth, mut notes: Vec<String>) -> Response {
    if let Some(reason) = crate::heap_watch::draining_reason() {
        health.ready = false;
        notes.push(reason.to_string());
    }
    let body = Health {
        status: if health.ready { "ok" } else { "unavailable" },
        running: health.running,
        waiting: health.waiting,
        kv_cache_usage: health.kv_usage,
        notes,
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
