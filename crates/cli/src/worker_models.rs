//! `kestrel worker` of several models under limits (`--max-loaded-models`,
//! `--models-memory-budget`, `--pin`): the models live in a [`ModelRegistry`], as on `kestrel
//! serve`, loaded with the same engine flags ([`EngineLoader`]) on one thread pool, each
//! announced as a worker of its own (`ID-NAME`) whose engine is loaded on its first job and
//! unloaded, least recently used and idle first, when another model needs the room.
//!
//! A worker announces a model with its identity, which needs the loaded model (its tokenizer,
//! template and limits), so each model is loaded once at start, in turn, within the limits;
//! the last ones stay loaded.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use kestrel_fleet::worker::model_host::{Launcher, ModelHost, OnDemand, OnDemandLoader};
use kestrel_fleet::worker::{Worker, WorkerConfig};
use kestrel_server::config::ServerConfig;
use kestrel_server::launch::Launched;
use kestrel_server::model_registry::{ModelEntry, ModelRegistry, RegistryOptions};

use crate::model_limit_args::ModelLimitArgs;
use crate::serve_models::{memory_estimate, EngineLoader};

/// How long an unloaded engine may take to stop (it is idle: no job holds it).
const UNLOAD_DEADLINE: Duration = Duration::from_secs(5);

impl Launcher for EngineLoader {
    fn launch(&self, name: &str, path: &Path) -> Result<Launched, String> {
        EngineLoader::launch(self, name, path).map_err(|e| format!("{e:#}"))
    }

    fn memory_estimate(&self, path: &Path) -> u64 {
        memory_estimate(path, &self.opts.kv_cache)
    }

    fn unloaded(&self, _name: &str) {
        kestrel_kernels::heap::release_free_heap();
    }
}

/// The registry of a worker's models, and its loader.
pub struct OnDemandModels {
    pub registry: Arc<ModelRegistry>,
    pub loader: Arc<OnDemandLoader>,
    pub names: Vec<String>,
}

impl OnDemandModels {
    /// The registry of `models` under `limits`, loading each with `engine_loader`; `load`
    /// names how the worker loads models beyond their files (part of their identities).
    pub fn new(
        models: Vec<ModelEntry>,
        limits: &ModelLimitArgs,
        engine_loader: EngineLoader,
        load: kestrel_fleet::identity::LoadSettings,
    ) -> Result<OnDemandModels> {
        let names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
        let options = RegistryOptions {
            max_loaded: limits.max_loaded_models.unwrap_or(names.len()),
            load_wait: None,
            unload_deadline: UNLOAD_DEADLINE,
            memory_budget: limits.models_memory_budget,
            aliases: Vec::new(),
            lora_modules: engine_loader.opts.lora_modules.clone(),
        };
        let loader = Arc::new(OnDemandLoader::new(Box::new(engine_loader), load));
        let registry = ModelRegistry::new(
            models,
            &limits.pin,
            loader.clone(),
            ServerConfig::default(),
            options,
        )?;
        crate::serve_models::warn_too_large(&registry, limits.models_memory_budget);
        Ok(OnDemandModels {
            registry: Arc::new(registry),
            loader,
            names,
        })
    }

    /// Loads each model once (in turn, unloading idle ones as the limits require) to learn
    /// its identity, and connects a worker `ID-NAME` for it. A model that cannot load under
    /// the limits is left out, with a warning.
    pub async fn connect(&self, config: &WorkerConfig) -> Result<Vec<Worker>> {
        let mut workers = Vec::new();
        for name in &self.names {
            match self.registry.acquire(name).await {
                Ok(lease) => drop(lease),
                Err(e) => {
                    tracing::warn!(model = %name, error = %e, "this model cannot be served under the limits; leaving it out");
                    continue;
                }
            }
            let described = self
                .loader
                .described(name)
                .with_context(|| format!("model {name} was loaded but not described"))?;
            let host = ModelHost::OnDemand(OnDemand {
                registry: self.registry.clone(),
                name: name.clone(),
                loader: self.loader.clone(),
            });
            let config = WorkerConfig {
                worker_id: format!("{}-{}", config.worker_id, crate::worker::id_part(name)),
                ..config.clone()
            };
            workers.push(Worker::with_host(config, described, host).await?);
        }
        anyhow::ensure!(
            !workers.is_empty(),
            "no model can be served under the limits"
        );
        Ok(workers)
    }
}
