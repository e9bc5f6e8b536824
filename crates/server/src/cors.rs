//! Cross-origin policy: `--cors` allows any origin; `--cors-origin URL` (repeatable) allows
//! only the listed origins. Without either, no CORS headers are sent (browsers refuse
//! cross-origin reads).

use axum::http::HeaderValue;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use crate::config::ServerConfig;

/// The CORS layer `config` asks for, if any. Origins that are not valid header values are
/// skipped with a warning (the CLI checks them first).
pub fn layer(config: &ServerConfig) -> Option<CorsLayer> {
    if config.cors {
        return Some(CorsLayer::permissive());
    }
    if config.cors_origins.is_empty() {
        return None;
    }
    let origins: Vec<HeaderValue> = config
        .cors_origins
        .iter()
        .filter_map(|o| match HeaderValue::from_str(o.trim_end_matches('/')) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(origin = %o, error = %e, "ignoring an invalid CORS origin");
                None
            }
        })
        .collect();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods(Any)
            .allow_headers(Any)
            .expose_headers([crate::request_id::HEADER]),
    )
}
