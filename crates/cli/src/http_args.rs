//! [`HttpArgs`]: how an HTTP front end listens and guards itself, shared by `kestrel serve` and
//! `kestrel gateway`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kestrel_server::responses::store::{ResponseStore, StoreLimits};
use kestrel_server::ServerConfig;

use crate::engine_args::parse_bytes;

#[derive(clap::Args)]
pub struct HttpArgs {
    /// TCP port to listen on.
    #[arg(long, env = "PORT", default_value_t = 8000)]
    pub port: u16,
    /// Address to bind (`--host` is accepted too, as vLLM and llama.cpp spell it).
    #[arg(
        long,
        visible_alias = "host",
        env = "HOSTNAME",
        default_value = "127.0.0.1"
    )]
    pub hostname: String,
    /// Require `Authorization: Bearer <key>` on every route but /health* and /metrics (an
    /// empty key is an error).
    #[arg(long, env = "KESTREL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Accept the keys listed in this file too (one per line; blank lines and # comments are
    /// ignored; a file without keys is an error).
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Give each API key its own partition of the prefix cache, so clients with different
    /// keys never share (or learn of) each other's cached prompts.
    #[arg(long)]
    pub cache_salt_by_api_key: bool,
    /// Largest request body, e.g. 4MiB (larger bodies get 413).
    #[arg(long, default_value = "4MiB", value_parser = parse_bytes)]
    pub max_body_size: u64,
    /// Allow cross-origin requests from any origin.
    #[arg(long)]
    pub cors: bool,
    /// Allow cross-origin requests from this origin (e.g. https://app.example.com);
    /// repeatable. Other origins get no CORS headers.
    #[arg(long = "cors-origin", value_name = "URL")]
    pub cors_origins: Vec<String>,
    /// Seconds in-flight requests may run on after SIGINT/SIGTERM; the process exits a few
    /// seconds later whatever clients do (a second signal exits at once).
    #[arg(long, default_value_t = 30)]
    pub shutdown_timeout: u64,
    /// Seconds a client has to send a request's headers (else the connection is closed).
    #[arg(long, default_value_t = 30)]
    pub header_timeout: u64,
    /// Seconds a client has to send a request's body (else 408).
    #[arg(long, default_value_t = 30)]
    pub body_timeout: u64,
    /// Most open connections; further clients wait until one closes.
    #[arg(long, default_value_t = kestrel_server::config::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Refuse request fields the API does not know (400 naming them) instead of ignoring them
    /// with a warning.
    #[arg(long)]
    pub strict_api: bool,
    /// Most responses `/v1/responses` keeps for `GET`, `DELETE` and `previous_response_id`
    /// (`store: true`); the oldest goes first. 0 keeps none.
    #[arg(long, default_value_t = kestrel_server::responses::store::DEFAULT_MAX_ENTRIES)]
    pub responses_store_size: usize,
    /// Seconds a stored response is kept.
    #[arg(long, default_value_t = kestrel_server::responses::store::DEFAULT_TTL.as_secs())]
    pub responses_store_ttl: u64,
}

impl HttpArgs {
    pub fn server_config(&self) -> Result<ServerConfig> {
        if self.cache_salt_by_api_key && self.api_key.is_none() && self.api_key_file.is_none() {
            anyhow::bail!("--cache-salt-by-api-key needs --api-key or --api-key-file");
        }
        Ok(ServerConfig {
            hostname: self.hostname.clone(),
            port: self.port,
            api_keys: crate::api_keys::collect(
                self.api_key.as_deref(),
                self.api_key_file.as_deref(),
            )?,
            cache_salt_by_api_key: self.cache_salt_by_api_key,
            body_limit: usize::try_from(self.max_body_size)
                .context("--max-body-size is too large")?,
            cors: self.cors,
            cors_origins: self.cors_origins.clone(),
            header_read_timeout: positive_secs("--header-timeout", self.header_timeout)?,
            body_read_timeout: positive_secs("--body-timeout", self.body_timeout)?,
            max_connections: self.max_connections.max(1),
            shutdown_deadline: Duration::from_secs(self.shutdown_timeout),
            enable_runtime_lora: false,
            strict_api: self.strict_api,
            response_store: Arc::new(ResponseStore::new(StoreLimits {
                max_entries: self.responses_store_size,
                ttl: positive_secs("--responses-store-ttl", self.responses_store_ttl)?,
            })),
        })
    }
}

/// `secs` as a duration; 0 is refused (it would time every request out).
fn positive_secs(flag: &str, secs: u64) -> Result<Duration> {
    if secs == 0 {
        bail!("{flag} must be at least 1 second");
    }
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Args {
        #[command(flatten)]
        http: HttpArgs,
    }

    fn config(args: &[&str]) -> Result<ServerConfig> {
        let argv = std::iter::once("kestrel").chain(args.iter().copied());
        Args::try_parse_from(argv)?.http.server_config()
    }

    #[test]
    fn the_responses_store_takes_its_flags() {
        let default = config(&[]).unwrap().response_store.limits();
        assert_eq!(default, StoreLimits::default());
        let set = config(&["--responses-store-size", "7", "--responses-store-ttl", "60"]).unwrap();
        let limits = set.response_store.limits();
        assert_eq!(
            (limits.max_entries, limits.ttl),
            (7, Duration::from_secs(60))
        );
        assert!(config(&["--responses-store-ttl", "0"]).is_err());
        let clone = set.clone();
        assert!(Arc::ptr_eq(&clone.response_store, &set.response_store));
    }
}
