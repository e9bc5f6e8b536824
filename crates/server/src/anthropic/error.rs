//! [`AnthropicError`]: an [`ApiError`] rendered in Anthropic's shape, beside
//! [`crate::error::OpenAiError`] and [`crate::error::TgiError`]:
//!
//! ```text
//! {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}
//! ```
//!
//! | Kind | Status | `error.type` |
//! |---|---|---|
//! | invalid request, body timeout, wrong method, conflict | 400, 408, 405, 409 | `invalid_request_error` |
//! | missing or wrong key | 401 | `authentication_error` |
//! | unknown model, adapter or route | 404 | `not_found_error` |
//! | body too large | 413 | `request_too_large` |
//! | overloaded (engine queue full, first-token objective) | 529 | `overloaded_error` |
//! | unavailable (shutting down, queue timeout) | 503 | `api_error` |
//! | internal | 500 | `api_error` |
//!
//! 529 and 503 carry `Retry-After`, as 429 and 503 do on the other routes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::wire::{AnthropicErrorBody, AnthropicErrorDetail};
use crate::error::{json_response, with_retry_after, ApiError, ErrorKind};

/// Anthropic's "overloaded" status.
pub const OVERLOADED: u16 = 529;

/// An [`ApiError`] rendered in Anthropic's shape.
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        AnthropicError(e)
    }
}

impl AnthropicError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self.0.kind() {
            ErrorKind::Overloaded => {
                StatusCode::from_u16(OVERLOADED).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
            }
            kind => kind.status(),
        }
    }

    /// The body.
    pub fn body(&self) -> AnthropicErrorBody {
        AnthropicErrorBody {
            kind: "error",
            error: AnthropicErrorDetail {
                kind: error_type(self.0.kind()),
                message: self.0.to_string(),
            },
        }
    }
}

/// Anthropic's `error.type` of a kind.
fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest
        | ErrorKind::Timeout
        | ErrorKind::MethodNotAllowed
        | ErrorKind::Conflict => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::PayloadTooLarge => "request_too_large",
        ErrorKind::Overloaded => "overloaded_error",
        ErrorKind::Unavailable | ErrorKind::Internal => "api_error",
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let kind = self.0.kind();
        with_retry_after(kind, json_response(self.status(), &self.body()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_anthropic_statuses_and_types() {
        let cases = [
            (ApiError::Invalid("x".into()), 400, "invalid_request_error"),
            (ApiError::Unauthorized, 401, "authentication_error"),
            (ApiError::ModelNotFound("m".into()), 404, "not_found_error"),
            (ApiError::PayloadTooLarge(1), 413, "request_too_large"),
            (ApiError::Overloaded(4), 529, "overloaded_error"),
            (ApiError::Unavailable("x".into()), 503, "api_error"),
            (ApiError::Internal("x".into()), 500, "api_error"),
        ];
        for (e, status, kind) in cases {
            let e = AnthropicError(e);
            assert_eq!(e.status().as_u16(), status);
            let body = serde_json::to_value(e.body()).unwrap();
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], kind);
            assert!(body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()));
        }
    }
}
