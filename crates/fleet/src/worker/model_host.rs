//! [`ModelHost`]: where a worker's engine comes from.
//!
//! * [`ModelHost::Fixed`]: one engine started with the worker and stopped with it (a worker
//!   of one model, or of several under no limit).
//! * [`ModelHost::OnDemand`]: a model of the process's [`ModelRegistry`], the one `kestrel
//!   serve` uses for several models: loaded on its first job, counted against
//!   `--max-loaded-models` and `--models-memory-budget`, unloaded (least recently used, idle,
//!   not `--pin`ned) when another model of the process needs the room. Each job holds a
//!   [`Lease`] on it until it ends, so a model with jobs is never unloaded.
//!
//! [`OnDemandLoader`] is the registry's loader for a worker: it starts an engine through the
//! caller's [`Launcher`], records the engine's handle for the jobs and, at a model's first
//! load, the descriptor the worker announces (its identity needs the loaded model).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use kestrel_engine::api::EngineStats;
use kestrel_engine::handle::EngineHandle;
use kestrel_model::weights::digest::WeightsDigest;
use kestrel_server::launch::Launched;
use kestrel_server::model_registry::{
    Lease, LoadFailure, ModelLoader, ModelRegistry, RegistryError,
};
use kestrel_server::model_slot::ModelState;
use kestrel_server::AppState;

use crate::identity::LoadSettings;
use crate::protocol::{AnnouncedAdapter, ModelDescriptor};

/// Where a worker's engine comes from (see the module docs).
pub enum ModelHost {
    Fixed(EngineHandle),
    OnDemand(OnDemand),
}

/// A model of a [`ModelRegistry`] whose engines an [`OnDemandLoader`] records.
pub struct OnDemand {
    pub registry: Arc<ModelRegistry>,
    pub name: String,
    pub loader: Arc<OnDemandLoader>,
}

/// An engine held for one job: an on-demand model stays loaded until it drops.
pub struct Held {
    pub engine: EngineHandle,
    _lease: Option<Lease>,
}

impl ModelHost {
    /// The engine, if it is loaded now (it is not loaded for this).
    pub fn current(&self) -> Option<EngineHandle> {
        match self {
            ModelHost::Fixed(engine) => Some(engine.clone()),
            ModelHost::OnDemand(m) => m.loader.engine(&m.name),
        }
    }

    /// The engine for one job, loading the model first when it is not (unloading idle ones
    /// to make room); an error when there is no room now or the load failed.
    pub async fn hold(&self) -> Result<Held, RegistryError> {
        match self {
            ModelHost::Fixed(engine) => Ok(Held {
                engine: engine.clone(),
                _lease: None,
            }),
            ModelHost::OnDemand(m) => {
                let lease = m.registry.acquire(&m.name).await?;
                let engine = m
                    .loader
                    .engine(&m.name)
                    .ok_or_else(|| RegistryError::LoadFailed {
                        name: m.name.clone(),
                        reason: Arc::from("the model's engine is not recorded"),
                    })?;
                Ok(Held {
                    engine,
                    _lease: Some(lease),
                })
            }
        }
    }

    /// Whether the model is loaded, loading or unloaded.
    pub fn state(&self) -> ModelState {
        match self {
            ModelHost::Fixed(_) => ModelState::Loaded,
            ModelHost::OnDemand(m) => m.registry.state_of(&m.name).unwrap_or(ModelState::Unloaded),
        }
    }

    /// Whether the model is loaded on a job's demand (and may be unloaded).
    pub fn on_demand(&self) -> bool {
        matches!(self, ModelHost::OnDemand(_))
    }

    /// The engine's counters, or zeros while it is not loaded.
    pub fn stats(&self) -> EngineStats {
        self.current().map(|e| e.stats()).unwrap_or_default()
    }
}

/// Starts the engine of a model (the worker's engine flags live in the binary).
pub trait Launcher: Send + Sync + 'static {
    /// The started engine of the model at `path`, served as `name`. Blocks for the load.
    fn launch(&self, name: &str, path: &Path) -> Result<Launched, String>;

    /// The memory the model at `path` is expected to take once loaded.
    fn memory_estimate(&self, path: &Path) -> u64;

    /// Called once an unloaded model's engine stopped.
    fn unloaded(&self, name: &str);
}

/// What a worker announces of a model: its descriptor and the LoRA adapters its engine
/// starts with (listed while it is not loaded).
#[derive(Debug, Clone)]
pub struct Described {
    pub descriptor: ModelDescriptor,
    pub adapters: Vec<AnnouncedAdapter>,
}

/// The [`ModelLoader`] of a worker's registry (see the module docs).
pub struct OnDemandLoader {
    launcher: Box<dyn Launcher>,
    settings: LoadSettings,
    engines: Mutex<HashMap<String, EngineHandle>>,
    described: Mutex<HashMap<String, Described>>,
}

impl OnDemandLoader {
    pub fn new(launcher: Box<dyn Launcher>, settings: LoadSettings) -> OnDemandLoader {
        OnDemandLoader {
            launcher,
            settings,
            engines: Mutex::new(HashMap::new()),
            described: Mutex::new(HashMap::new()),
        }
    }

    /// The engine of `name` while it is loaded.
    pub fn engine(&self, name: &str) -> Option<EngineHandle> {
        lock(&self.engines).get(name).cloned()
    }

    /// What the first load of `name` described (`None` before it).
    pub fn described(&self, name: &str) -> Option<Described> {
        lock(&self.described).get(name).cloned()
    }

    /// The descriptor of a started engine: its weights hashed (or the cached digest read),
    /// its identity and limits.
    fn describe(&self, launched: &Launched) -> Result<Described, String> {
        let digest = WeightsDigest::of(&launched.weights).map_err(|e| e.to_string())?;
        let identity = crate::identity::identify(launched, &digest, &self.settings)
            .map_err(|e| e.to_string())?;
        let descriptor =
            crate::descriptor::describe(launched, identity).map_err(|e| e.to_string())?;
        Ok(Described {
            descriptor,
            adapters: announced(&launched.engine),
        })
    }
}

impl ModelLoader for OnDemandLoader {
    fn load(&self, name: &str, path: &Path) -> Result<AppState, LoadFailure> {
        let launched = self.launcher.launch(name, path).map_err(LoadFailure)?;
        if self.described(name).is_none() {
            let described = self.describe(&launched).map_err(LoadFailure)?;
            lock(&self.described).insert(name.to_string(), described);
        }
        lock(&self.engines).insert(name.to_string(), launched.engine.clone());
        Ok(launched.into_state())
    }

    fn memory_estimate(&self, path: &Path) -> u64 {
        self.launcher.memory_estimate(path)
    }

    fn unloaded(&self, name: &str) {
        lock(&self.engines).remove(name);
        self.launcher.unloaded(name);
    }
}

/// The adapters `engine` serves, as a heartbeat announces them.
pub fn announced(engine: &EngineHandle) -> Vec<AnnouncedAdapter> {
    engine
        .adapters()
        .into_iter()
        .map(|card| AnnouncedAdapter {
            name: card.name,
            path: card.path.display().to_string(),
            rank: card.rank,
        })
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain maps, each change one insert or remove: a panic elsewhere cannot leave them torn.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
