//! Middleware: every 429, 503 and 529 (Anthropic's overloaded) response carries `Retry-After`, a whole number of seconds
//! from the queue length and recent throughput ([`crate::throughput::retry_after_secs`]).

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::AppState;

/// Sets `Retry-After` on 429, 503 and 529 responses (replacing a route's fixed value).
pub async fn set_retry_after(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let status = response.status();
    let busy = status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::SERVICE_UNAVAILABLE
        || status.as_u16() == crate::anthropic::error::OVERLOADED;
    if !busy {
        return response;
    }
    let waiting = state.backend().engine_stats().map_or(0, |s| s.waiting);
    let secs = crate::throughput::retry_after_secs(waiting);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}
