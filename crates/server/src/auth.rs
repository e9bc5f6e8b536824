//! API-key authentication: `Authorization: Bearer <key>` or Anthropic's `x-api-key: <key>`.
//! The whole `Authorization` value is compared with `Bearer <key>` (an `x-api-key` value is
//! read as `Bearer <value>`) in constant time (case-sensitive, no trimming), so the comparison
//! leaks neither a prefix match nor the key's contents through timing. A refusal is rendered
//! in Anthropic's shape on the Messages routes (`/v1/messages*`), in OpenAI's elsewhere.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::anthropic::error::AnthropicError;
use crate::error::{ApiError, OpenAiError};
use crate::key_salt::KeySalt;

/// The accepted `Authorization` header values (one per key).
#[derive(Clone)]
pub struct ApiKey {
    expected: Arc<[Vec<u8>]>,
    salt_by_key: bool,
}

impl ApiKey {
    /// Expects `Authorization: Bearer <key>`.
    pub fn new(key: &str) -> ApiKey {
        ApiKey::any_of(&[key.to_string()])
    }

    /// Accepts `Authorization: Bearer <key>` for any of `keys`.
    pub fn any_of(keys: &[String]) -> ApiKey {
        ApiKey {
            expected: keys
                .iter()
                .map(|k| format!("Bearer {k}").into_bytes())
                .collect(),
            salt_by_key: false,
        }
    }

    /// Also attach each accepted request's [`KeySalt`] (`--cache-salt-by-api-key`).
    pub fn salting_the_cache(mut self, salt_by_key: bool) -> ApiKey {
        self.salt_by_key = salt_by_key;
        self
    }

    /// Whether `header` is exactly one of the expected values. Every key is compared (no early
    /// exit), and lengths differ only for wrong keys, so timing reveals at most key lengths.
    pub fn matches(&self, header: &[u8]) -> bool {
        let mut found = subtle::Choice::from(0);
        for expected in self.expected.iter() {
            found |= header.ct_eq(expected);
        }
        found.into()
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Middleware: 401 unless the request carries the key (in the family's error shape); accepted
/// requests get their key's [`KeySalt`] when the cache is salted by key.
pub async fn require_api_key(State(key): State<ApiKey>, mut req: Request, next: Next) -> Response {
    let accepted = presented_keys(req.headers()).find(|v| key.matches(v));
    match accepted {
        Some(header) => {
            if key.salt_by_key {
                req.extensions_mut()
                    .insert(KeySalt::of_authorization(&header));
            }
            next.run(req).await
        }
        None if crate::anthropic::owns_path(req.uri().path()) => {
            AnthropicError(ApiError::Unauthorized).into_response()
        }
        None => OpenAiError(ApiError::Unauthorized).into_response(),
    }
}

/// The keys a request presents, as `Authorization` values: that header as sent, and `Bearer `
/// with the `x-api-key` header (so one key salts the cache the same either way).
fn presented_keys(headers: &HeaderMap) -> impl Iterator<Item = Vec<u8>> + '_ {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    let x_api_key = headers
        .get("x-api-key")
        .map(|k| [b"Bearer ".as_slice(), k.as_bytes()].concat());
    bearer.into_iter().chain(x_api_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_api_key_is_read_as_a_bearer_key() {
        let key = ApiKey::new("sk-1");
        let accepted = |headers: &HeaderMap| presented_keys(headers).any(|v| key.matches(&v));
        let mut headers = HeaderMap::new();
        assert!(!accepted(&headers));
        headers.insert("x-api-key", "sk-1".parse().unwrap());
        assert!(accepted(&headers));
        headers.insert(
            axum::http::header::AUTHORIZATION,
            "Bearer sk-0".parse().unwrap(),
        );
        assert!(accepted(&headers), "either header may carry the key");
        headers.insert("x-api-key", "sk-2".parse().unwrap());
        assert!(!accepted(&headers));
        headers.insert(
            axum::http::header::AUTHORIZATION,
            "Bearer sk-1".parse().unwrap(),
        );
        assert!(accepted(&headers));
    }
}
