//! `kestrel worker`: a full engine that takes requests from the fleet's Redis streams and
//! streams their results back; `--metrics-port` serves its `/metrics` and `/health`. Given
//! several models (`--model NAME=PATH` repeated, `--models-dir`), one engine per model on one
//! thread pool, each taking its own model's requests as a worker of its own (`ID-NAME`): all
//! started at once, or, under `--max-loaded-models` / `--models-memory-budget` / `--pin`,
//! each loaded on its first job ([`crate::worker_models`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::FutureExt;
use kestrel_engine::handle::EngineHandle;
use kestrel_fleet::worker::{EngineList, Worker, WorkerConfig};
use kestrel_server::launch::{LaunchOptions, Launched};

use crate::engine_args::EngineArgs;
use crate::lora_args::LoraArgs;
use crate::model_list::ModelList;
use crate::restart_args::{RestartArgs, RestartFlag};
use crate::serve_models::EngineLoader;
use crate::worker_models::OnDemandModels;

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
    /// LoRA adapters (announced with the model; the gateway routes requests naming one to
    /// the workers serving it).
    #[command(flatten)]
    pub lora: LoraArgs,
    /// Serve every .gguf file and HF checkpoint directory in DIR too, each named by its file
    /// stem or directory name (beside any --model NAME=PATH). A worker of several models
    /// runs them on one thread pool, sharing --kv-cache-memory evenly, and announces each.
    #[arg(long, value_name = "DIR")]
    pub models_dir: Option<std::path::PathBuf>,
    /// Limits on the models loaded at once, as on `serve`: a worker of several models given
    /// any of them loads each model on its first job and unloads the least recently used
    /// idle one to make room; without them it loads every model at start.
    #[command(flatten)]
    pub limits: crate::model_limit_args::ModelLimitArgs,
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
    let models = launch(&args, &worker_id, &config)?;
    let watch = args.restart.watch()?;
    // Every engine's series carry `model_name` (one model or several), so that each model's
    // workers can be scaled on their own series.
    let metrics = kestrel_server::metrics::install_recorder()?;
    let metrics_app = kestrel_fleet::worker::metrics_router_of(models.engines(), metrics);
    crate::runtime()?.block_on(async move {
        if let Some(port) = args.metrics_port {
            let listener = tokio::net::TcpListener::bind((args.metrics_host.as_str(), port))
                .await
                .with_context(|| format!("cannot listen on {}:{port}", args.metrics_host))?;
            tokio::spawn(async move { axum::serve(listener, metrics_app).await });
        }
        let workers = models.connect(&config).await?;
        for worker in &workers {
            println!(
                "kestrel worker {} serving {} from {}",
                worker.id(),
                worker.identity(),
                args.redis_url
            );
        }
        // The gateway stops routing to a worker as soon as it stops taking jobs: no notice.
        let restart = RestartFlag::default();
        let stop = restart
            .clone()
            .stop_on(kestrel_server::shutdown_signal(), watch, Duration::ZERO)
            .shared();
        let deadline = Duration::from_secs(args.shutdown_timeout);
        let runs = workers.into_iter().map(|w| w.run(stop.clone(), deadline));
        for done in futures_util::future::join_all(runs).await {
            done?;
        }
        models.shutdown(deadline).await;
        restart.exit_if_tripped();
        Ok(())
    })
}

/// The models of a worker process.
enum Models {
    /// Engines started with the process, each with the id it works under.
    Started(Vec<(String, Launched)>),
    /// Models loaded on their first job, under limits.
    OnDemand(OnDemandModels),
}

impl Models {
    /// The engines running now, by model name.
    fn engines(&self) -> EngineList {
        match self {
            Models::Started(started) => {
                let list: Vec<(String, EngineHandle)> = started
                    .iter()
                    .map(|(_, l)| (l.model.model_id.clone(), l.engine.clone()))
                    .collect();
                Arc::new(move || list.clone()) as EngineList
            }
            Models::OnDemand(models) => {
                let (loader, names) = (models.loader.clone(), models.names.clone());
                Arc::new(move || {
                    names
                        .iter()
                        .filter_map(|n| loader.engine(n).map(|e| (n.clone(), e)))
                        .collect()
                }) as EngineList
            }
        }
    }

    /// A fleet worker for each model.
    async fn connect(&self, config: &WorkerConfig) -> Result<Vec<Worker>> {
        match self {
            Models::Started(started) => {
                let mut workers = Vec::new();
                for (id, launched) in started {
                    let config = WorkerConfig {
                        worker_id: id.clone(),
                        ..config.clone()
                    };
                    workers.push(Worker::connect(config, launched).await?);
                }
                Ok(workers)
            }
            Models::OnDemand(models) => models.connect(config).await,
        }
    }

    /// Stops the engines of models loaded on demand (a started engine stops with its worker).
    async fn shutdown(self, deadline: Duration) {
        if let Models::OnDemand(models) = self {
            let registry = models.registry.clone();
            let _ = tokio::task::spawn_blocking(move || registry.shutdown(deadline)).await;
        }
    }
}

/// Starts the engine of each model asked for, with the id it works under: the worker's id
/// for one model; `ID-NAME` for each of several (`--model NAME=PATH` repeated,
/// `--models-dir`), all on one thread pool and sharing `--kv-cache-memory` evenly. With
/// limits on the models loaded at once, none is started here: see [`OnDemandModels`].
fn launch(args: &WorkerArgs, worker_id: &str, config: &WorkerConfig) -> Result<Models> {
    let mut opts = args.engine.launch_options()?;
    args.lora.apply(&mut opts);
    // Before any engine starts, so that each records its series under its model's name.
    kestrel_server::metrics::install_recorder()?;
    opts.label_metrics = true;
    let list = ModelList::from_args(&args.engine.model, args.models_dir.as_deref())?;
    let ModelList::Several(models) = list else {
        if args.limits.any() {
            bail!("--max-loaded-models, --models-memory-budget and --pin are for a worker of several models (--model NAME=PATH or --models-dir)");
        }
        let (launched, _) = args.engine.launch_with(&opts)?;
        return Ok(Models::Started(vec![(worker_id.to_string(), launched)]));
    };
    if args.engine.served_model_name.is_some() {
        bail!("--served-model-name names the model of a worker of one model; with several, --model NAME=PATH names each");
    }
    let names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
    if let Some(twice) = names
        .iter()
        .enumerate()
        .find(|(i, n)| names[..*i].contains(n))
    {
        bail!("the model name {} is given twice", twice.1);
    }
    let pool = crate::thread_pool(args.engine.threads);
    if args.limits.any() {
        let max_loaded = args.limits.max_loaded_models.unwrap_or(models.len());
        opts.kv_cache = crate::serve_models::kv_share(opts.kv_cache, max_loaded);
        let loader = EngineLoader {
            engine: args.engine.clone(),
            opts,
            pool,
        };
        let on_demand = OnDemandModels::new(models, &args.limits, loader, config.load.clone())?;
        return Ok(Models::OnDemand(on_demand));
    }
    opts.kv_cache = crate::serve_models::kv_share(opts.kv_cache, models.len());
    let started = models
        .iter()
        .map(|m| {
            let opts = LaunchOptions {
                model_id: Some(m.name.clone()),
                ..opts.clone()
            };
            let (launched, _) = args
                .engine
                .launch_model(&m.path, &opts, pool)
                .with_context(|| format!("model {}", m.name))?;
            Ok((format!("{worker_id}-{}", id_part(&m.name)), launched))
        })
        .collect::<Result<_>>()?;
    Ok(Models::Started(started))
}

/// `name` as part of a worker id: characters outside `[A-Za-z0-9._-]` become `_`.
pub fn id_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "worker".into());
    format!("{host}-{}", std::process::id())
}
