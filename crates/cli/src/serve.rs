//! `kestrel serve`: load a model, start the engine and serve the OpenAI- and TGI-compatible
//! HTTP API until SIGINT/SIGTERM.

use anyhow::{bail, Context, Result};

use crate::engine_args::EngineArgs;
use crate::http_args::HttpArgs;
use crate::lora_args::LoraArgs;
use crate::model_list::ModelList;
use crate::request_limit_args::RequestLimitArgs;
use crate::restart_args::{RestartArgs, RestartFlag};

/// How long a server draining for a restart answers 503 on `/health` before it stops taking
/// connections (a load balancer's probe period).
pub const RESTART_NOTICE: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The model, as with `--model` (`kestrel serve model.gguf`, like `vllm serve MODEL`).
    #[arg(value_name = "MODEL")]
    pub model_path: Option<std::path::PathBuf>,
    /// Read flags from this TOML file (keys are the long flag names, e.g. `max_num_seqs = 32`);
    /// flags and environment variables given as well win over it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub limits: RequestLimitArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
    /// Mount POST /v1/load_lora_adapter and /v1/unload_lora_adapter.
    #[arg(long)]
    pub enable_runtime_lora: bool,
    #[command(flatten)]
    pub multi: MultiModelArgs,
    #[command(flatten)]
    pub restart: RestartArgs,
    #[command(flatten)]
    pub trace: crate::trace_args::TraceArgs,
}

/// Flags of a server of several models.
#[derive(clap::Args)]
pub struct MultiModelArgs {
    /// Serve every .gguf file and HF checkpoint directory in DIR, each named by its file stem
    /// or directory name (beside any --model NAME=PATH).
    #[arg(long, value_name = "DIR")]
    pub models_dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub limits: crate::model_limit_args::ModelLimitArgs,
    /// With several models: ALIAS is another name of the model NAME (repeatable).
    #[arg(long, value_name = "ALIAS=NAME", value_parser = parse_alias)]
    pub model_alias: Vec<(String, String)>,
}

/// `ALIAS=NAME`.
fn parse_alias(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((alias, name)) if !alias.is_empty() && !name.is_empty() => {
            Ok((alias.to_string(), name.to_string()))
        }
        _ => Err(format!("expected ALIAS=NAME, got {s:?}")),
    }
}

pub fn run(mut args: ServeArgs) -> Result<()> {
    let _traces = args.trace.install("kestrel-serve")?;
    if let Some(path) = args.model_path.take() {
        if !args.engine.model.is_empty() && args.engine.model != [path.clone()] {
            bail!("the model is given twice, as an argument and with --model (or MODEL_ID)");
        }
        args.engine.model = vec![path];
    }
    crate::config_file::log_source(args.config.as_deref());
    let list = ModelList::from_args(&args.engine.model, args.multi.models_dir.as_deref())?;
    if let ModelList::Several(models) = list {
        return crate::serve_models::run(args, models);
    }
    if !args.multi.limits.pin.is_empty()
        || !args.multi.model_alias.is_empty()
        || args.multi.limits.models_memory_budget.is_some()
    {
        bail!("--pin, --model-alias and --models-memory-budget are for a server of several models (--model NAME=PATH or --models-dir)");
    }
    let mut config = args.http.server_config()?;
    config.enable_runtime_lora = args.enable_runtime_lora;
    let mut opts = args.engine.launch_options()?;
    args.limits.apply(&mut opts)?;
    args.lora.apply(&mut opts);
    let (launched, model) = args.engine.launch_with(&opts)?;
    let engine = launched.engine.clone();
    let kv = launched.kv_cache;
    let pool_threads = args.engine.threads.map_or_else(
        || kestrel_kernels::cpu::ThreadPool::global().n_threads(),
        |n| n.max(1),
    );
    let state = launched.into_state();
    let heap_watch = args.restart.watch()?;
    let watch = crate::engine_watch::EngineWatch::default();
    let runtime = crate::runtime()?;
    runtime.block_on(async move {
        let listener = kestrel_server::bind(&config).await?;
        let addr = listener.local_addr().context("no local address")?;
        println!(
            "kestrel serving {} on http://{addr}",
            state.model().model_id
        );
        crate::startup_summary::Summary {
            threads: args.engine.threads,
            pool_threads,
            opts: &opts,
            kv,
            limits: state.limits(),
            model: &model,
            served_as: &state.model().model_id,
            addr,
        }
        .log();
        let signal = crate::shutdown::bounded_signal(config.shutdown_deadline);
        let restart = RestartFlag::default();
        let signal = restart.clone().stop_on(signal, heap_watch, RESTART_NOTICE);
        let stop = watch.clone().stop_signal(engine, signal);
        kestrel_server::serve_on(listener, config, state, stop).await?;
        restart.exit_if_tripped();
        if watch.engine_died() {
            bail!(
                "the engine stopped unexpectedly (see the log); exiting so the server is replaced"
            );
        }
        Ok(())
    })
}
