//! First-token latency objectives: the `ttft_slo_ms` request field (OpenAI bodies and TGI
//! `parameters`) and the `X-TTFT-SLO-Ms` header ([`TtftSloHeader`]). Both are a whole number
//! of milliseconds from the request's arrival to its first token; the field wins when both
//! are given. The engine refuses a request whose objective it predicts it cannot meet with 429
//! and `Retry-After` (see `kestrel_engine::ttft_predictor`); requests without one are
//! unaffected.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ApiError;

/// The header that sets a request's objective when its body does not.
pub const HEADER: &str = "x-ttft-slo-ms";
/// Largest objective accepted: one hour.
pub const MAX_TTFT_SLO_MS: i64 = 3_600_000;

/// `ms` as an objective: 1 ms to an hour; `param` names the field (or header) at fault.
pub fn objective(param: &'static str, ms: i64) -> Result<Duration, ApiError> {
    if !crate::validation::param_ranges::TTFT_SLO_MS.contains_int(ms) {
        return Err(ApiError::param(
            param,
            format!("{param} must be between 1 and {MAX_TTFT_SLO_MS} milliseconds, got {ms}"),
        ));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// The body field's objective, if given.
pub fn from_field(ms: Option<i64>) -> Result<Option<Duration>, ApiError> {
    ms.map(|ms| objective("ttft_slo_ms", ms)).transpose()
}

/// The objective of the `X-TTFT-SLO-Ms` header, if sent (a bad value is a 400).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TtftSloHeader(pub Option<Duration>);

impl<S: Send + Sync> FromRequestParts<S> for TtftSloHeader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get(HEADER) else {
            return Ok(TtftSloHeader(None));
        };
        let ms = value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .ok_or_else(|| {
                ApiError::param(
                    "X-TTFT-SLO-Ms",
                    "the X-TTFT-SLO-Ms header must be a whole number of milliseconds",
                )
            })?;
        objective("X-TTFT-SLO-Ms", ms).map(|d| TtftSloHeader(Some(d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objectives_are_bounded() {
        assert_eq!(
            objective("ttft_slo_ms", 250).unwrap(),
            Duration::from_millis(250)
        );
        assert!(objective("ttft_slo_ms", 0).is_err());
        assert!(objective("ttft_slo_ms", -5).is_err());
        assert!(objective("ttft_slo_ms", MAX_TTFT_SLO_MS + 1).is_err());
        assert_eq!(from_field(None).unwrap(), None);
        let e = from_field(Some(0)).unwrap_err();
        assert!(e.to_string().contains("ttft_slo_ms"), "{e}");
    }
}
