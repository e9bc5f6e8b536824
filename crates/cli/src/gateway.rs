//! `kestrel gateway`: the fleet's HTTP front door. Serves `kestrel serve`'s routes, loads no
//! weights, and runs every request on the workers behind a Redis server.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use kestrel_fleet::gateway::GatewayConfig;

use crate::http_args::HttpArgs;

#[derive(clap::Args)]
pub struct GatewayArgs {
    /// Read flags from this TOML file (keys are the long flag names); flags and environment
    /// variables given as well win over it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// The Redis server the workers read from, e.g. redis://127.0.0.1:6379.
    #[arg(long, env = "KESTREL_REDIS_URL")]
    pub redis_url: String,
    #[command(flatten)]
    pub http: HttpArgs,
    /// Queued requests no worker has taken yet beyond which new ones get 429.
    #[arg(long, default_value_t = 1024)]
    pub max_queue_len: usize,
    /// Abort requests that wait longer than this many seconds to start.
    #[arg(long)]
    pub max_queue_time: Option<f64>,
    /// Fail a queued request once no worker has been alive for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub no_worker_timeout: u64,
    /// Most urgent request `priority` clients may ask for (lower runs first); the default 0
    /// lets clients only lower their own urgency.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub min_client_priority: i32,
    /// Which stream a request is queued on: `cache-aware` sends it to the worker whose prefix
    /// cache holds the longest start of its prompt (when that worker has room), `shared` to the
    /// queue every worker reads.
    #[arg(long, default_value = "cache-aware", value_parser = ["cache-aware", "shared"])]
    pub routing: String,
    /// Most distinct prefix-cache blocks the cache-aware router's index keeps (the oldest
    /// are dropped beyond it).
    #[arg(long, default_value_t = 1 << 18)]
    pub prefix_index_max_blocks: usize,
    #[command(flatten)]
    pub trace: crate::trace_args::TraceArgs,
    /// Longest text to template or tokenize per request (prompt, messages, /tokenize inputs),
    /// e.g. 1MiB; longer texts get 413 before any tokenizing (as on `kestrel serve`).
    #[arg(long, default_value = "1MiB", value_parser = crate::engine_args::parse_bytes)]
    pub max_input_bytes: u64,
    /// Events a streaming client may fall behind before its request is aborted (and its
    /// worker's KV cache freed).
    #[arg(long, default_value_t = kestrel_server::event_buffer::DEFAULT_MAX_BUFFERED_EVENTS)]
    pub max_buffered_events: usize,
}

pub fn run(args: GatewayArgs) -> Result<()> {
    crate::config_file::log_source(args.config.as_deref());
    let _traces = args.trace.install("kestrel-gateway")?;
    let mut http = args.http.server_config()?;
    // The run-time LoRA routes answer, with the fleet's refusal: adapters are the workers'
    // `--lora-modules` (see `FleetBackend::load_adapter`).
    http.enable_runtime_lora = true;
    let mut config = GatewayConfig::new(&args.redis_url);
    if args.max_queue_len == 0 {
        bail!("--max-queue-len must be at least 1");
    }
    config.max_queue_len = args.max_queue_len;
    config.min_client_priority = args.min_client_priority;
    config.routing = args.routing.parse().map_err(anyhow::Error::msg)?;
    if args.prefix_index_max_blocks == 0 {
        bail!("--prefix-index-max-blocks must be at least 1");
    }
    config.prefix_index_max_blocks = args.prefix_index_max_blocks;
    config.no_worker_timeout = Duration::from_secs(args.no_worker_timeout);
    config.max_input_bytes =
        usize::try_from(args.max_input_bytes).context("--max-input-bytes is too large")?;
    if args.max_buffered_events == 0 {
        bail!("--max-buffered-events must be at least 1");
    }
    config.max_buffered_events = args.max_buffered_events;
    config.max_queue_time = match args.max_queue_time {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => bail!("--max-queue-time must be a positive number of seconds, got {s}"),
    };
    crate::runtime()?.block_on(async move {
        let listener = kestrel_server::bind(&http).await?;
        let addr = listener.local_addr().context("no local address")?;
        println!("kestrel gateway on http://{addr}, queue {}", args.redis_url);
        let shutdown = crate::shutdown::bounded_signal(http.shutdown_deadline);
        kestrel_fleet::gateway::serve(listener, http, config, shutdown).await?;
        Ok(())
    })
}
