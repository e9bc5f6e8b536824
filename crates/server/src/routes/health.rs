//! `GET /health`: 200 while the engine accepts work, 503 once it is shutting down or gone.
//!
//! The probe submits a one-token request and drops it at once (which aborts it): the submit
//! succeeds only while the engine thread holds its command channel, so a dead or stopping engine
//! answers 503. A full engine (`Overloaded`) is alive and answers 200.


use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use kestrel_engine::api::{EngineRequest, SubmitError};
use kestrel_engine::sampling::SamplingParams;
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

/// Liveness of the engine.
#[utoipa::path(get, path = "/health", responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn health(State(state): State<AppState>) -> Response {
    let stats = state.engine().stats();
    let alive = probe(&state);
    let body = Health {
        status: if alive { "ok" } else { "unavailable" },
        running: stats.running,
        waiting: stats.waiting,
        kv_cache_usage: stats.kv_usage,
    };
    let code = if alive {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(code, &body)
}

fn probe(state: &AppState) -> bool {
    let token = state.tokenizer().bos_id().unwrap_or(0);
    let sampling = SamplingParams {
        temperature: 0.0,
        max_tokens: 1,
        ..SamplingParams::default()
    };
    let Ok(req) = EngineRequest::new(vec![token], sampling, &state.engine().limits()) else {
        return false;
    };
    match state.engine().submit(req) {
        // Dropping the stream aborts the probe.
        Ok(_stream) => true,
        Err(SubmitError::Overloaded(_)) => true,
        Err(SubmitError::Stopped) => false,
    }
}
