//! [`ServerConfig`]: how the HTTP side listens and guards itself. Engine limits live in
//! `kestrel_engine::handle::EngineConfig`, request limits in [`crate::state::Limits`].

use std::sync::Arc;
use std::time::Duration;

use crate::responses::store::ResponseStore;

/// Default request body limit: 4 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 4 << 20;

/// Default time a client has to send a request's headers, and then its body.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default most open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Time beyond `shutdown_deadline` for the last responses to be written.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Listening address and HTTP-level policies.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Host name or IP to bind (`127.0.0.1`, `0.0.0.0`, `localhost`, ...).
    pub hostname: String,
    /// TCP port; 0 picks a free one.
    pub port: u16,
    /// When not empty, every route except `/health*` and `/metrics` requires
    /// `Authorization: Bearer <key>` with one of these keys (none may be empty).
    pub api_keys: Vec<String>,
    /// Give each API key its own partition of the prefix cache (`--cache-salt-by-api-key`).
    pub cache_salt_by_api_key: bool,
    /// Largest accepted request body, in bytes (larger bodies get 413).
    pub body_limit: usize,
    /// Allow cross-origin requests from any origin (`--cors`).
    pub cors: bool,
    /// Allow cross-origin requests from these origins only (`--cors-origin`, repeatable).
    pub cors_origins: Vec<String>,
    /// Time a client has to send a request's headers (else the connection is closed).
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's body once a handler reads it (else 408).
    pub body_read_timeout: Duration,
    /// Most open connections; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// How long in-flight requests may run on after a shutdown signal; open connections get
    /// this plus [`SHUTDOWN_GRACE`], then the server returns whatever clients do.
    pub shutdown_deadline: Duration,
    /// Mount `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`
    /// (`--enable-runtime-lora`).
    pub enable_runtime_lora: bool,
    /// Refuse request fields a route does not know with a 400 naming them (`--strict-api`);
    /// by default they are ignored with a warning, as vLLM does.
    pub strict_api: bool,
    /// The stored responses of `/v1/responses` (`--responses-store-size`,
    /// `--responses-store-ttl`). Clones of this config share it, so every router built from
    /// it (the gateway builds one per model) serves the same responses.
    pub response_store: Arc<ResponseStore>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            hostname: "127.0.0.1".into(),
            port: 8000,
            api_keys: Vec::new(),
            cache_salt_by_api_key: false,
            body_limit: DEFAULT_BODY_LIMIT,
            cors: false,
            cors_origins: Vec::new(),
            header_read_timeout: DEFAULT_READ_TIMEOUT,
            body_read_timeout: DEFAULT_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_deadline: Duration::from_secs(30),
            enable_runtime_lora: false,
            strict_api: false,
            response_store: Arc::new(ResponseStore::default()),
        }
    }
}
