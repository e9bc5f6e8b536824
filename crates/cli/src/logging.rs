//! The log subscriber: which lines show (`KESTREL_LOG`, else `RUST_LOG`, else the command's
//! default level) and how they look (`--log-format text|json`), on stderr.
//!
//! The server commands (`serve`, `gateway`, `worker`) default to `info`, so the startup
//! summary and the per-request access log show; the others default to `error`, keeping
//! interactive output clean.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colored on a terminal).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, the event's fields
    /// (`message`, `request_id`, ...) and the current `span`.
    Json,
}

/// Installs the subscriber; `default_level` applies when neither variable is set.
pub fn init(format: LogFormat, default_level: &str) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(default_level))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

/// `KESTREL_LOG`, else `RUST_LOG`, else `default_level` (empty variables count as unset).
fn filter(default_level: &str) -> EnvFilter {
    let from_env = ["KESTREL_LOG", "RUST_LOG"]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .find(|v| !v.trim().is_empty());
    EnvFilter::new(from_env.as_deref().unwrap_or(default_level))
}
