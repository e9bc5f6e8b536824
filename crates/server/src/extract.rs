//! [`Wire`]: the JSON body extractor. It reads the body up to the configured limit (413 past
//! it), checks UTF-8 (400 with the byte offset) and parses JSON (400 with serde's message,
//! which names the line and column). Top-level fields the route does not know
//! ([`UnknownFields`]) are ignored with a warning naming them, or refused with a 400 naming
//! them when the server runs with `--strict-api` ([`ApiPolicy`]).

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::unknown_fields::UnknownFields;

/// The request body limit, stored as a request extension by the router.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// How long a handler waits for the whole body, stored as a request extension by the router.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub std::time::Duration);

/// How strictly request bodies are read, stored as a request extension by the router.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiPolicy {
    /// Refuse unknown request fields instead of ignoring them.
    pub strict: bool,
}

/// A JSON body parsed into `T`.
#[derive(Debug, Clone)]
pub struct Wire<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Wire<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(crate::config::DEFAULT_BODY_LIMIT, |l| l.0);
        let policy = req
            .extensions()
            .get::<ApiPolicy>()
            .copied()
            .unwrap_or_default();
        let timeout = req
            .extensions()
            .get::<BodyTimeout>()
            .map_or(crate::config::DEFAULT_READ_TIMEOUT, |t| t.0);
        let bytes = read_body(req.into_body(), limit, timeout).await?;
        parse_body(&bytes, policy).map(Wire)
    }
}

/// The whole body: 413 beyond `limit` bytes, 408 when it has not arrived within `timeout`.
pub async fn read_body(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<axum::body::Bytes, ApiError> {
    tokio::time::timeout(timeout, read_limited(body, limit))
        .await
        .map_err(|_| ApiError::BodyTimeout(timeout))?
}

/// A request body as `T`: UTF-8 (400 with the byte offset), JSON (400 with serde's message),
/// then unknown top-level fields per `policy`.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8], policy: ApiPolicy) -> Result<T, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ApiError::Utf8(e.to_string()))?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ApiError::Json(e.to_string()))?;
    check_unknown::<T>(&value, policy)?;
    // Parsed again from the text so that type errors keep serde's line and column.
    serde_json::from_str(text).map_err(|e| ApiError::Json(e.to_string()))
}

/// Refuses (strict) or logs the top-level fields `T` does not know.
fn check_unknown<T: DeserializeOwned>(
    value: &serde_json::Value,
    policy: ApiPolicy,
) -> Result<(), ApiError> {
    let unknown = UnknownFields::of::<T>(value);
    if unknown.is_empty() {
        return Ok(());
    }
    if policy.strict {
        return Err(ApiError::UnknownFields(unknown));
    }
    tracing::warn!(fields = %unknown, "ignoring unknown request fields");
    Ok(())
}

async fn read_limited(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            ApiError::PayloadTooLarge(limit)
        } else {
            ApiError::Invalid(format!("cannot read the request body: {e}"))
        }
    })
}
