//! Bearer-token authentication. The whole `Authorization` header value is compared with
//! `Bearer <key>` in constant time (case-sensitive, no trimming), so the comparison leaks
//! neither a prefix match nor the key's contents through timing.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::{ApiError, OpenAiError};

/// The expected `Authorization` header value.
#[derive(Clone)]
pub struct ApiKey {
    expected: Arc<[u8]>,
}

impl ApiKey {
    /// Expects `Authorization: Bearer <key>`.
    pub fn new(key: &str) -> ApiKey {
        ApiKey {
            expected: format!("Bearer {key}").into_bytes().into(),
        }
    }

    /// Whether `header` is exactly the expected value. Lengths differ only for wrong keys, so
    /// the early length check reveals at most the key's length.
    pub fn matches(&self, header: &[u8]) -> bool {
        header.ct_eq(&self.expected).into()
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Middleware: 401 with an OpenAI error body unless the request carries the key.
pub async fn require_api_key(State(key): State<ApiKey>, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .is_some_and(|v| key.matches(v.as_bytes()));
    if ok {
        next.run(req).await
    } else {
        OpenAiError(ApiError::Unauthorized).into_response()
    }
}
