//! `kestrel worker`: a full engine that takes requests from the fleet's Redis streams and
//! streams their results back; `--metrics-port` serves its `/metrics` and `/health`.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use kestrel_fleet::worker::{Worker, WorkerConfig};

use crate::engine_args::EngineArgs;
use crate::restart_args::{RestartArgs, RestartFlag};

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// Read flags from this TOML file (keys are the long flag names); flags and environment
    /// variables given as well win over it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// The Redis server the gateway queues requests on, e.g. redis://127.0.0.1:6379.
    #[arg(long, env = "KESTREL_REDIS_URL")]
    pub redis_url: String,
    /// Unique name of this worker in the fleet [default: host name and process id].
    #[arg(long, env = "KESTREL_WORKER_ID")]
    pub worker_id: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Serve /metrics and /health on this port.
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Address for the metrics port.
    #[arg(long, default_value = "127.0.0.1")]
    pub metrics_host: String,
    /// Seconds running requests may take to finish after SIGINT/SIGTERM (the rest are re-run
    /// by other workers).
    #[arg(long, default_value_t = 30)]
    pub shutdown_timeout: u64,
    /// Seconds a taken request may go without its worker's heartbeat before another worker
    /// claims it.
    #[arg(long, default_value_t = 5.0)]
    pub claim_idle: f64,
    /// Deliveries of one request (first run plus re-runs after worker failures) before it
    /// fails with an error.
    #[arg(long, default_value_t = 3)]
    pub max_deliveries: u32,
    #[command(flatten)]
    pub restart: RestartArgs,
    #[command(flatten)]
    pub trace: crate::trace_args::TraceArgs,
}

pub fn run(args: WorkerArgs) -> Result<()> {
    crate::config_file::log_source(args.config.as_deref());
    let _traces = args.trace.install("kestrel-worker")?;
    if !(args.claim_idle.is_finite() && args.claim_idle >= 2.0) {
        bail!(
            "--claim-idle must be at least 2 seconds (twice the heartbeat), got {}",
            args.claim_idle
        );
    }
    if args.max_deliveries == 0 {
        bail!("--max-deliveries must be at least 1");
    }
    let worker_id = args.worker_id.clone().unwrap_or_else(default_worker_id);
    let mut config = WorkerConfig::new(&args.redis_url, &worker_id);
    config.claim_idle = Duration::from_secs_f64(args.claim_idle);
    config.max_deliveries = args.max_deliveries;
    config.load.quantization = args
        .engine
        .quantize
        .as_ref()
        .map(|method| format!("{method}/{}", args.engine.quantize_group));
    let launched = args.engine.launch()?;
    let watch = args.restart.watch()?;
    let metrics_app =
        kestrel_fleet::worker::metrics_router(launched.engine.clone(), launched.metrics.clone());
    crate::runtime()?.block_on(async move {
        if let Some(port) = args.metrics_port {
            let listener = tokio::net::TcpListener::bind((args.metrics_host.as_str(), port))
                .await
                .with_context(|| format!("cannot listen on {}:{port}", args.metrics_host))?;
            tokio::spawn(async move { axum::serve(listener, metrics_app).await });
        }
        let worker = Worker::connect(config, &launched).await?;
        println!(
            "kestrel worker {worker_id} serving {} from {}",
            worker.identity(),
            args.redis_url
        );
        // The gateway stops routing to a worker as soon as it stops taking jobs: no notice.
        let restart = RestartFlag::default();
        let stop =
            restart
                .clone()
                .stop_on(kestrel_server::shutdown_signal(), watch, Duration::ZERO);
        worker
            .run(stop, Duration::from_secs(args.shutdown_timeout))
            .await?;
        restart.exit_if_tripped();
        Ok(())
    })
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "worker".into());
    format!("{host}-{}", std::process::id())
}
