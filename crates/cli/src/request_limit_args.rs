//! [`RequestLimitArgs`]: the per-request limits `kestrel serve`'s HTTP front end enforces. A
//! worker takes none of them: its requests come through a gateway, which has its own
//! (`kestrel gateway --max-queue-time`, `--min-client-priority`, `--max-queue-len`).

use std::time::Duration;

use anyhow::{bail, Context, Result};
use kestrel_server::launch::LaunchOptions;

use crate::engine_args::parse_bytes;

#[derive(clap::Args)]
pub struct RequestLimitArgs {
    /// Longest text to template or tokenize per request (prompt, messages, /tokenize inputs),
    /// e.g. 1MiB; longer texts get 413 before any tokenizing.
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes)]
    pub max_input_bytes: u64,
    /// Events a streaming client may fall behind before its request is aborted (and its KV
    /// cache freed).
    #[arg(long, default_value_t = kestrel_server::event_buffer::DEFAULT_MAX_BUFFERED_EVENTS)]
    pub max_buffered_events: usize,
    /// Requests in flight beyond this get 429.
    #[arg(long, env = "MAX_CONCURRENT_REQUESTS", default_value_t = 256)]
    pub max_concurrent_requests: usize,
    /// Abort requests that wait longer than this many seconds to start.
    #[arg(long)]
    pub max_queue_time: Option<f64>,
    /// Most urgent request `priority` clients may ask for (lower runs first); the default 0
    /// lets clients only lower their own urgency. Set it negative to allow urgent requests.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub min_client_priority: i32,
}

impl RequestLimitArgs {
    /// Sets the limits in `opts`; errors name the flag at fault.
    pub fn apply(&self, opts: &mut LaunchOptions) -> Result<()> {
        opts.max_queue_time = match self.max_queue_time {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
            Some(s) => bail!("--max-queue-time must be a positive number of seconds, got {s}"),
        };
        opts.max_concurrent_requests = Some(self.max_concurrent_requests);
        opts.min_client_priority = self.min_client_priority;
        opts.max_input_bytes =
            usize::try_from(self.max_input_bytes).context("--max-input-bytes is too large")?;
        opts.max_buffered_events = self.max_buffered_events;
        Ok(())
    }
}
