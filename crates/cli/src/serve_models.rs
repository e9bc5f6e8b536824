//! `kestrel serve` with several models (`--model NAME=PATH` repeated, `--models-dir`): a
//! [`ModelRegistry`] whose models are loaded on first request, each into its own engine built
//! with the same flags as the single-model server ([`EngineLoader`]), all on one inference
//! thread pool so that two engines never run more threads than the cores.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_server::launch::{KvBudget, LaunchOptions, Launched};
use kestrel_server::model_registry::{
    LoadFailure, ModelEntry, ModelLoader, ModelRegistry, RegistryOptions,
};
use kestrel_server::AppState;

use crate::engine_args::EngineArgs;
use crate::restart_args::RestartFlag;
use crate::serve::ServeArgs;

/// `kestrel serve`'s `--max-loaded-models` when not given.
const SERVE_MAX_LOADED: usize = 2;

/// Loads one model of the registry with the process's engine flags (`serve`, or a `worker`
/// that loads its models on demand).
pub struct EngineLoader {
    pub engine: EngineArgs,
    pub opts: LaunchOptions,
    pub pool: &'static ThreadPool,
}

impl EngineLoader {
    /// The started engine of the model at `path`, served as `name`. Blocks.
    pub fn launch(&self, name: &str, path: &Path) -> Result<Launched> {
        let opts = LaunchOptions {
            model_id: Some(name.to_string()),
            ..self.opts.clone()
        };
        self.engine
            .launch_model(path, &opts, self.pool)
            .map(|(launched, _)| launched)
    }
}

/// The memory a model is expected to take: its weights file(s), plus its KV cache when that is
/// given in bytes (a KV budget in tokens is not counted).
pub fn memory_estimate(path: &Path, kv: &KvBudget) -> u64 {
    let kv_bytes = match kv {
        KvBudget::Bytes(bytes) => *bytes,
        _ => 0,
    };
    crate::model_size::weights_bytes(path).saturating_add(kv_bytes)
}

impl ModelLoader for EngineLoader {
    fn load(&self, name: &str, path: &Path) -> Result<AppState, LoadFailure> {
        self.launch(name, path)
            .map(Launched::into_state)
            .map_err(|e| LoadFailure(format!("{e:#}")))
    }

    fn memory_estimate(&self, path: &Path) -> u64 {
        memory_estimate(path, &self.opts.kv_cache)
    }

    /// The engine's buffers were freed into the allocator's arenas: give them back.
    fn unloaded(&self, _name: &str) {
        kestrel_kernels::heap::release_free_heap();
    }
}

/// Serves `models` until SIGINT/SIGTERM.
pub fn run(args: ServeArgs, models: Vec<ModelEntry>) -> Result<()> {
    if args.engine.served_model_name.is_some() {
        bail!("--served-model-name names the model of a single-model server; with several, --model NAME=PATH names each");
    }
    let mut config = args.http.server_config()?;
    config.enable_runtime_lora = args.enable_runtime_lora;
    let max_loaded = args
        .multi
        .limits
        .max_loaded_models
        .unwrap_or(SERVE_MAX_LOADED);
    let mut opts = args.engine.launch_options()?;
    args.limits.apply(&mut opts)?;
    args.lora.apply(&mut opts);
    opts.kv_cache = kv_share(opts.kv_cache, max_loaded);
    opts.label_metrics = true;
    let options = RegistryOptions {
        max_loaded,
        load_wait: opts.max_queue_time,
        unload_deadline: config.shutdown_deadline,
        memory_budget: args.multi.limits.models_memory_budget,
        aliases: args.multi.model_alias.clone(),
        lora_modules: opts.lora_modules.clone(),
    };
    // One pool for every engine: each engine's steps run on it in turn.
    let pool = crate::thread_pool(args.engine.threads);
    kestrel_server::metrics::install_recorder()?;
    let names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
    let loader = Arc::new(EngineLoader {
        engine: args.engine,
        opts,
        pool,
    });
    let shutdown_deadline = config.shutdown_deadline;
    let heap_watch = args.restart.watch()?;
    let runtime = crate::runtime()?;
    runtime.block_on(async move {
        let registry = ModelRegistry::new(models, &args.multi.limits.pin, loader, config, options)?;
        warn_too_large(&registry, args.multi.limits.models_memory_budget);
        let listener = kestrel_server::bind(registry.http()).await?;
        let addr = listener.local_addr().context("no local address")?;
        println!(
            "kestrel serving {} models ({}) on http://{addr}",
            names.len(),
            names.join(", ")
        );
        tracing::info!(
            models = %names.join(","),
            max_loaded_models = max_loaded,
            pinned = %args.multi.limits.pin.join(","),
            models_memory_budget = args.multi.limits.models_memory_budget,
            pool_threads = pool.n_threads(),
            "serving several models; each loads on its first request"
        );
        let signal = crate::shutdown::bounded_signal(shutdown_deadline);
        let restart = RestartFlag::default();
        let signal = restart
            .clone()
            .stop_on(signal, heap_watch, crate::serve::RESTART_NOTICE);
        kestrel_server::serve_models(listener, Arc::new(registry), signal).await?;
        restart.exit_if_tripped();
        Ok(())
    })
}

/// Logs each model that can never load under the memory budget (its requests get 503).
pub fn warn_too_large(registry: &ModelRegistry, budget: Option<u64>) {
    let Some(budget) = budget else { return };
    for m in registry.listing() {
        if m.memory_estimate > budget {
            tracing::warn!(
                model = %m.name,
                estimate_bytes = m.memory_estimate,
                budget_bytes = budget,
                "this model is larger than --models-memory-budget and will not load"
            );
        }
    }
}

/// Each engine's part of the KV budget: a byte budget is shared out between the engines that
/// may be loaded at once; a token budget is per engine.
pub fn kv_share(budget: KvBudget, max_loaded: usize) -> KvBudget {
    match budget {
        KvBudget::Bytes(bytes) => KvBudget::Bytes(bytes / max_loaded.max(1) as u64),
        tokens => tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_budget_is_shared_and_a_token_budget_is_not() {
        assert_eq!(
            kv_share(KvBudget::Bytes(1 << 30), 4),
            KvBudget::Bytes(1 << 28)
        );
        assert_eq!(kv_share(KvBudget::Bytes(100), 0), KvBudget::Bytes(100));
        assert_eq!(kv_share(KvBudget::Tokens(512), 4), KvBudget::Tokens(512));
    }

    #[test]
    fn the_estimate_is_the_weights_file_plus_a_kv_budget_in_bytes() {
        let file =
            std::env::temp_dir().join(format!("kestrel-estimate-{}.gguf", std::process::id()));
        std::fs::write(&file, vec![0u8; 1000]).unwrap();
        assert_eq!(memory_estimate(&file, &KvBudget::Bytes(24)), 1024);
        assert_eq!(memory_estimate(&file, &KvBudget::Tokens(512)), 1000);
        std::fs::remove_file(&file).unwrap();
    }
}
