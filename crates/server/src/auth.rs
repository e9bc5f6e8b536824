//! Bearer-token authentication. The whole `Authorization` header value is compared with
//! `Bearer <key>` in constant time (case-sensitive, no trimming), so the comparison leaks
//! neither a prefix match nor the key's contents through timing.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

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

/// Middleware: 401 with an OpenAI error body unless the request carries the key; accepted
/// requests get their key's [`KeySalt`] when the cache is salted by key.
pub async fn require_api_key(State(key): State<ApiKey>, mut req: Request, next: Next) -> Response {
    let accepted = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .filter(|v| key.matches(v.as_bytes()))
        .map(|v| KeySalt::of_authorization(v.as_bytes()));
    match accepted {
        Some(salt) => {
            if key.salt_by_key {
                req.extensions_mut().insert(salt);
            }
            next.run(req).await
        }
        None => OpenAiError(ApiError::Unauthorized).into_response(),
    }
}
