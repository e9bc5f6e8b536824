//! [`RequestScope`]: what a generation request carries besides its body, gathered by one
//! extractor: the prefix-cache partition of the API key that authenticated it
//! ([`KeySalt`], attached by the authentication middleware) and its first-token objective
//! from the `X-TTFT-SLO-Ms` header.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use kestrel_engine::api::EngineRequest;

use crate::error::ApiError;
use crate::key_salt::KeySalt;
use crate::validation::ttft_slo::TtftSloHeader;

/// A generation request's key partition and header objective.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestScope {
    /// The API key's cache partition, when `--cache-salt-by-api-key` is on.
    pub key_salt: Option<KeySalt>,
    /// The `X-TTFT-SLO-Ms` objective, for requests whose body sets none.
    pub ttft_slo: Option<Duration>,
}

impl RequestScope {
    /// `req` with its cache salt scoped to the key (unchanged without one).
    pub fn apply(&self, req: EngineRequest) -> EngineRequest {
        KeySalt::apply(self.key_salt.as_ref(), req)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestScope {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let TtftSloHeader(ttft_slo) = TtftSloHeader::from_request_parts(parts, state).await?;
        Ok(RequestScope {
            key_salt: parts.extensions.get::<KeySalt>().cloned(),
            ttft_slo,
        })
    }
}
