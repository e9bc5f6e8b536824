//! [`ServerConfig`]: how the HTTP side listens and guards itself. Engine limits live in
//! `kestrel_engine::handle::EngineConfig`, request limits in [`crate::state::Limits`].

use std::time::Duration;

/// Default request body limit: 4 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 4 << 20;

/// Listening address and HTTP-level policies.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Host name or IP to bind (`127.0.0.1`, `0.0.0.0`, `localhost`, ...).
    pub hostname: String,
    /// TCP port; 0 picks a free one.
    pub port: u16,
    /// When set, every route except `/health` and `/metrics` requires
    /// `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Largest accepted request body, in bytes (larger bodies get 413).
    pub body_limit: usize,
    /// Allow cross-origin requests from any origin.
    pub cors: bool,
    /// How long in-flight requests may run on after a shutdown signal.
    pub shutdown_deadline: Duration,
    /// Mount `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`
    /// (`--enable-runtime-lora`).
    pub enable_runtime_lora: bool,
    /// Refuse request fields a route does not know with a 400 naming them (`--strict-api`);
    /// by default they are ignored with a warning, as vLLM does.
    pub strict_api: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            hostname: "127.0.0.1".into(),
            port: 8000,
            api_key: None,
            body_limit: DEFAULT_BODY_LIMIT,
            cors: false,
            shutdown_deadline: Duration::from_secs(30),
            enable_runtime_lora: false,
            strict_api: false,
        }
    }
}
