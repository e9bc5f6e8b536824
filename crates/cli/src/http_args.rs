//! [`HttpArgs`]: how an HTTP front end listens and guards itself, shared by `kestrel serve` and
//! `kestrel gateway`.

use std::time::Duration;

use anyhow::{Context, Result};
use kestrel_server::ServerConfig;

use crate::engine_args::parse_bytes;

#[derive(clap::Args)]
pub struct HttpArgs {
    /// TCP port to listen on.
    #[arg(long, env = "PORT", default_value_t = 8000)]
    pub port: u16,
    /// Address to bind.
    #[arg(long, env = "HOSTNAME", default_value = "127.0.0.1")]
    pub hostname: String,
    /// Require `Authorization: Bearer <key>` on every route but /health and /metrics.
    #[arg(long, env = "KESTREL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Largest request body, e.g. 4MiB (larger bodies get 413).
    #[arg(long, default_value = "4MiB", value_parser = parse_bytes)]
    pub max_body_size: u64,
    /// Allow cross-origin requests from any origin.
    #[arg(long)]
    pub cors: bool,
    /// Seconds in-flight requests may run on after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 30)]
    pub shutdown_timeout: u64,
    /// Refuse request fields the API does not know (400 naming them) instead of ignoring them
    /// with a warning.
    #[arg(long)]
    pub strict_api: bool,
}

impl HttpArgs {
    pub fn server_config(&self) -> Result<ServerConfig> {
        Ok(ServerConfig {
            hostname: self.hostname.clone(),
            port: self.port,
            api_key: self.api_key.clone().filter(|k| !k.is_empty()),
            body_limit: usize::try_from(self.max_body_size)
                .context("--max-body-size is too large")?,
            cors: self.cors,
            shutdown_deadline: Duration::from_secs(self.shutdown_timeout),
            enable_runtime_lora: false,
            strict_api: self.strict_api,
        })
    }
}
