//! [`ModelRegistry`]: the models one `kestrel serve` process may serve, by name, each in a
//! [`ModelSlot`]. A model is loaded when a request first names it (through the caller's
//! [`ModelLoader`], which builds its engine as the single-model path does) and gets its own
//! engine thread, KV cache and routes; every engine shares the process's inference pool.
//!
//! At most `max_loaded` models hold memory at once, and, with a memory budget, the models'
//! estimated memory (weights file + KV cache share, [`ModelLoader::memory_estimate`]) stays
//! within it. Loading another unloads the least recently used idle ones (no request waiting
//! for them, queued or running) that are not pinned until it fits ([`crate::model_room`]);
//! when it cannot fit the request is refused at once ([`RegistryError::NoRoom`],
//! [`RegistryError::TooLarge`]: a 503 with `Retry-After`). A request may name a model by an
//! alias ([`crate::model_aliases`]). Requests for a model being loaded
//! wait for it, up to `load_wait`; a load that fails is reported to each of them and leaves the
//! other models serving.
//!
//! The slots live behind one mutex that is never held across an `.await` or a load: loads
//! and engine shutdowns run on the blocking pool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::model_aliases::{AliasError, Aliases};
use crate::model_room::{plan_room, Holder, NoRoom, RoomLimits};
use crate::model_slot::{ActiveGuard, LoadOutcome, ModelSlot, ModelState, ServedModel, SlotPhase};
use crate::state::AppState;

/// Counter, labelled `model_name`: models loaded (first loads and reloads).
pub const MODEL_LOADS_TOTAL: &str = "kestrel:model_loads_total";
/// Counter, labelled `model_name`: models unloaded (to make room, or asked for).
pub const MODEL_UNLOADS_TOTAL: &str = "kestrel:model_unloads_total";
/// Gauge: models loaded now.
pub const MODELS_LOADED: &str = "kestrel:models_loaded";
/// Gauge: the estimated memory of the models loaded or loading now (what the budget limits).
pub const MODELS_MEMORY_ESTIMATE: &str = "kestrel:models_memory_estimate_bytes";

/// Registers the help text of the registry's metrics.
pub fn describe_metrics() {
    metrics::describe_counter!(
        MODEL_LOADS_TOTAL,
        metrics::Unit::Count,
        "Models loaded, by model"
    );
    metrics::describe_counter!(
        MODEL_UNLOADS_TOTAL,
        metrics::Unit::Count,
        "Models unloaded (to make room or on request), by model"
    );
    metrics::describe_gauge!(MODELS_LOADED, metrics::Unit::Count, "Models loaded now");
    metrics::describe_gauge!(
        MODELS_MEMORY_ESTIMATE,
        metrics::Unit::Bytes,
        "Estimated memory of the models loaded or loading now (weights file + KV cache share)"
    );
}

/// Why a model could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoadFailure(pub String);

/// Loads a model and starts its engine.
pub trait ModelLoader: Send + Sync + 'static {
    /// The routes' state of the model at `path`, served as `name`. Blocks for the load.
    fn load(&self, name: &str, path: &Path) -> Result<AppState, LoadFailure>;

    /// The memory the model at `path` is expected to take once loaded (checked against the
    /// memory budget before it loads); 0 by default.
    fn memory_estimate(&self, path: &Path) -> u64 {
        let _ = path;
        0
    }

    /// Called once an unloaded model's engine has stopped and the registry dropped its
    /// state (e.g. to hand the freed memory back to the system); nothing by default.
    fn unloaded(&self, name: &str) {
        let _ = name;
    }
}

/// Why a request cannot have its model.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error("the model `{0}` does not exist (GET /v1/models lists the served models)")]
    Unknown(String),
    #[error("cannot load the model `{name}` now: {loaded} models are loaded or loading and unloading the idle, unpinned ones would not make room (--max-loaded-models, --models-memory-budget); retry later")]
    NoRoom { name: String, loaded: usize },
    #[error("the model `{name}` needs about {need} bytes, more than the whole memory budget of {budget} bytes (--models-memory-budget)")]
    TooLarge {
        name: String,
        need: u64,
        budget: u64,
    },
    #[error("the model `{name}` failed to load: {reason}")]
    LoadFailed { name: String, reason: Arc<str> },
    #[error("the model `{name}` did not finish loading within {waited:?}; retry later")]
    LoadTimeout { name: String, waited: Duration },
    #[error("the model `{0}` is pinned (--pin) and is never unloaded")]
    Pinned(String),
    #[error("the model `{0}` has requests in flight or is loading; unload it once they finish")]
    Busy(String),
    #[error("the server is shutting down")]
    Stopping,
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> ApiError {
        match e {
            RegistryError::Unknown(name) => ApiError::ModelNotFound(name),
            RegistryError::NoRoom { .. }
            | RegistryError::TooLarge { .. }
            | RegistryError::LoadTimeout { .. }
            | RegistryError::Stopping => ApiError::Unavailable(e.to_string()),
            RegistryError::LoadFailed { .. } => ApiError::Internal(e.to_string()),
            RegistryError::Pinned(_) | RegistryError::Busy(_) => ApiError::Conflict(e.to_string()),
        }
    }
}

/// How many models may be loaded and how long requests wait for a load.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Most models loaded (or loading) at once; at least 1.
    pub max_loaded: usize,
    /// How long a request waits for its model's load; `None`: until it ends.
    pub load_wait: Option<Duration>,
    /// What an unloaded engine's in-flight requests get to finish (none are, for an idle one).
    pub unload_deadline: Duration,
    /// Most estimated bytes of the models loaded at once; `None`: only `max_loaded` limits.
    pub memory_budget: Option<u64>,
    /// Other names of the models: `(alias, model)`.
    pub aliases: Vec<(String, String)>,
    /// The LoRA adapters every engine starts with, `(name, path)`: listed for a model that is
    /// not loaded (a loaded one lists its engine's adapters).
    pub lora_modules: Vec<(String, PathBuf)>,
}

/// A model named in the registry's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    pub name: String,
    pub path: PathBuf,
}

/// Why the registry's configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryConfigError {
    #[error("no models to serve")]
    Empty,
    #[error("the model name `{0}` is given twice")]
    Duplicate(String),
    #[error("--pin {0}: no model has that name")]
    UnknownPin(String),
    #[error("--max-loaded-models must be at least 1 and at least the number of pinned models ({pinned}), got {max}")]
    MaxLoaded { max: usize, pinned: usize },
    #[error(transparent)]
    Alias(#[from] AliasError),
}

/// A model held by one request: it is not unloaded until the lease drops.
pub struct Lease {
    pub model: Arc<ServedModel>,
    pub guard: ActiveGuard,
}

/// One model as `/v1/models` lists it.
#[derive(Debug, Clone)]
pub struct ModelListing {
    pub name: String,
    pub state: ModelState,
    /// Longest prompt + output, once the model has been loaded.
    pub max_model_len: Option<usize>,
    /// Why its last load failed, if it did and none succeeded since.
    pub error: Option<String>,
    /// Its other names.
    pub aliases: Vec<String>,
    /// Its LoRA adapters, `(name, path)`: the engine's when loaded, else those it starts with.
    pub adapters: Vec<(String, String)>,
    /// Its estimated memory.
    pub memory_estimate: u64,
}

struct Slots {
    by_name: BTreeMap<String, ModelSlot>,
    /// Each model's longest context, learned at its first load.
    max_model_len: BTreeMap<String, usize>,
}

/// The models of a multi-model server.
pub struct ModelRegistry {
    slots: Mutex<Slots>,
    /// Names in the order they were given (the first answers requests naming none).
    order: Vec<String>,
    aliases: Aliases,
    loader: Arc<dyn ModelLoader>,
    http: ServerConfig,
    options: RegistryOptions,
    stopping: AtomicBool,
}

/// What a request does after the registry decided under its lock.
enum Step {
    Ready(Arc<ServedModel>),
    Wait(watch::Receiver<Option<LoadOutcome>>),
}

impl ModelRegistry {
    /// A registry of `models` (all unloaded), `pins` never unloaded. `http` configures each
    /// model's routes.
    pub fn new(
        models: Vec<ModelEntry>,
        pins: &[String],
        loader: Arc<dyn ModelLoader>,
        http: ServerConfig,
        options: RegistryOptions,
    ) -> Result<ModelRegistry, RegistryConfigError> {
        if models.is_empty() {
            return Err(RegistryConfigError::Empty);
        }
        let mut by_name = BTreeMap::new();
        let mut order = Vec::new();
        for m in models {
            if by_name.contains_key(&m.name) {
                return Err(RegistryConfigError::Duplicate(m.name));
            }
            order.push(m.name.clone());
            let mut slot = ModelSlot::new(m.name.clone(), m.path, false);
            slot.estimate = loader.memory_estimate(&slot.path);
            by_name.insert(m.name, slot);
        }
        let aliases = Aliases::new(&options.aliases, &order)?;
        for pin in pins {
            let name = aliases.model_of(pin).unwrap_or(pin);
            let slot = by_name
                .get_mut(name)
                .ok_or_else(|| RegistryConfigError::UnknownPin(pin.clone()))?;
            slot.pinned = true;
        }
        let pinned = by_name.values().filter(|s| s.pinned).count();
        if options.max_loaded == 0 || options.max_loaded < pinned {
            return Err(RegistryConfigError::MaxLoaded {
                max: options.max_loaded,
                pinned,
            });
        }
        Ok(ModelRegistry {
            slots: Mutex::new(Slots {
                by_name,
                max_model_len: BTreeMap::new(),
            }),
            order,
            aliases,
            loader,
            http,
            options,
            stopping: AtomicBool::new(false),
        })
    }

    /// The HTTP settings each model's routes are built with.
    pub fn http(&self) -> &ServerConfig {
        &self.http
    }

    /// How many models may be served.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no model is configured (never true of a built registry).
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The model answering requests that name none: the most recently used loaded one, else
    /// the first given.
    pub fn default_name(&self) -> String {
        let recent = self
            .lock()
            .by_name
            .values()
            .filter(|s| s.state() == ModelState::Loaded)
            .max_by_key(|s| s.last_used)
            .map(|s| s.name.clone());
        // `new` refuses an empty list, so there is a first name.
        recent.unwrap_or_else(|| self.order.first().cloned().unwrap_or_default())
    }

    /// The model `name` stands for: itself when it is a model's name, the model of an alias,
    /// else `None`.
    pub fn resolve(&self, name: &str) -> Option<String> {
        if self.order.iter().any(|n| n == name) {
            return Some(name.to_string());
        }
        self.aliases.model_of(name).map(str::to_string)
    }

    /// The model serving the LoRA adapter `adapter`: the most recently used loaded model whose
    /// engine has it, else the first model given that starts with it.
    pub fn model_of_adapter(&self, adapter: &str) -> Option<String> {
        let loaded = self
            .loaded()
            .into_iter()
            .filter(|m| m.state.backend().adapter_id(adapter).is_some())
            .map(|m| m.state.model().model_id.clone())
            .collect::<Vec<_>>();
        let slots = self.lock();
        let recent = loaded
            .into_iter()
            .filter_map(|name| slots.by_name.get(&name).map(|s| (s.last_used, name)))
            .max()
            .map(|(_, name)| name);
        let configured = || {
            let listed = self.options.lora_modules.iter().any(|(n, _)| n == adapter);
            listed.then(|| self.order.first().cloned()).flatten()
        };
        recent.or_else(configured)
    }

    /// Every model in the order given, with its state.
    pub fn listing(&self) -> Vec<ModelListing> {
        let loaded = self.loaded();
        let mut listed: Vec<ModelListing> = {
            let slots = self.lock();
            self.order
                .iter()
                .filter_map(|name| {
                    let slot = slots.by_name.get(name)?;
                    Some(ModelListing {
                        name: name.clone(),
                        state: slot.state(),
                        max_model_len: slots.max_model_len.get(name).copied(),
                        error: slot.last_error.as_deref().map(str::to_string),
                        aliases: self.aliases.of(name),
                        adapters: Vec::new(),
                        memory_estimate: slot.estimate,
                    })
                })
                .collect()
        };
        // Asked of the engines outside the registry's lock.
        for m in &mut listed {
            m.adapters = self.adapters_of(&m.name, &loaded);
        }
        listed
    }

    /// The LoRA adapters of `name`: its engine's when it is among `loaded`, else the
    /// configured ones.
    fn adapters_of(&self, name: &str, loaded: &[Arc<ServedModel>]) -> Vec<(String, String)> {
        match loaded.iter().find(|m| m.state.model().model_id == name) {
            Some(m) => m
                .state
                .backend()
                .adapters()
                .into_iter()
                .map(|a| (a.name, a.path.display().to_string()))
                .collect(),
            None => self
                .options
                .lora_modules
                .iter()
                .map(|(n, p)| (n.clone(), p.display().to_string()))
                .collect(),
        }
    }

    /// The state of the model `name` (not an alias); `None` for no such model.
    pub fn state_of(&self, name: &str) -> Option<ModelState> {
        self.lock().by_name.get(name).map(ModelSlot::state)
    }

    /// The loaded models.
    pub fn loaded(&self) -> Vec<Arc<ServedModel>> {
        self.lock()
            .by_name
            .values()
            .filter_map(|s| match &s.phase {
                SlotPhase::Loaded(m) => Some(m.clone()),
                _ => None,
            })
            .collect()
    }

    /// The model `name` (or that its alias stands for), loading it first if needed
    /// (unloading idle ones to make room).
    pub async fn acquire(self: &Arc<Self>, name: &str) -> Result<Lease, RegistryError> {
        let name = self
            .resolve(name)
            .ok_or_else(|| RegistryError::Unknown(name.to_string()))?;
        let (step, guard) = self.begin(&name)?;
        let model = match step {
            Step::Ready(model) => model,
            Step::Wait(rx) => self.wait(&name, rx).await?,
        };
        Ok(Lease { model, guard })
    }

    /// Unloads `name` (or the model its alias stands for) if it is loaded and idle; `false`:
    /// it was not loaded.
    pub async fn unload(&self, name: &str) -> Result<bool, RegistryError> {
        let name = &self
            .resolve(name)
            .ok_or_else(|| RegistryError::Unknown(name.to_string()))?;
        let model = {
            let mut slots = self.lock();
            let slot = slots
                .by_name
                .get_mut(name)
                .ok_or_else(|| RegistryError::Unknown(name.to_string()))?;
            match slot.phase {
                SlotPhase::Unloaded => return Ok(false),
                _ if slot.pinned => return Err(RegistryError::Pinned(name.to_string())),
                SlotPhase::Loaded(_) if slot.is_idle() => match take_loaded(slot) {
                    Some(model) => model,
                    None => return Ok(false),
                },
                _ => return Err(RegistryError::Busy(name.to_string())),
            }
        };
        self.record_loaded_gauge();
        let (deadline, loader) = (self.options.unload_deadline, self.loader.clone());
        let stopped =
            tokio::task::spawn_blocking(move || stop_model(model, deadline, &*loader)).await;
        if stopped.is_err() {
            tracing::error!(model = %name, "stopping the model's engine panicked");
        }
        Ok(true)
    }

    /// Stops every loaded engine (draining within `deadline`) and refuses later requests.
    /// Blocks: call it from the blocking pool.
    pub fn shutdown(&self, deadline: Duration) {
        self.stopping.store(true, Ordering::Release);
        for model in self.loaded() {
            model.state.backend().shutdown(deadline);
        }
    }

    /// Under the lock: hold `name` and decide whether the request has it, waits for its
    /// load, or starts that load (choosing which model to unload for it).
    fn begin(self: &Arc<Self>, name: &str) -> Result<(Step, ActiveGuard), RegistryError> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(RegistryError::Stopping);
        }
        let mut slots = self.lock();
        let slot = slots
            .by_name
            .get_mut(name)
            .ok_or_else(|| RegistryError::Unknown(name.to_string()))?;
        match &slot.phase {
            SlotPhase::Loaded(model) => {
                let model = model.clone();
                return Ok((Step::Ready(model), slot.hold()));
            }
            SlotPhase::Loading(rx) => {
                let rx = rx.clone();
                return Ok((Step::Wait(rx), slot.hold()));
            }
            SlotPhase::Unloaded => {}
        }
        let victims = self.make_room(&mut slots, name)?;
        let (tx, rx) = watch::channel(None);
        let slot = slots
            .by_name
            .get_mut(name)
            .ok_or_else(|| RegistryError::Unknown(name.to_string()))?;
        slot.phase = SlotPhase::Loading(rx.clone());
        let guard = slot.hold();
        let path = slot.path.clone();
        drop(slots);
        self.record_loaded_gauge();
        self.spawn_load(name.to_string(), path, victims, tx);
        Ok((Step::Wait(rx), guard))
    }

    /// Takes out the loaded models to unload so that `name` may load (none: there is room
    /// already); takes none when that would not be enough.
    fn make_room(
        &self,
        slots: &mut MutexGuard<'_, Slots>,
        name: &str,
    ) -> Result<Vec<Arc<ServedModel>>, RegistryError> {
        let limits = RoomLimits {
            max_loaded: self.options.max_loaded,
            memory_budget: self.options.memory_budget,
        };
        let need = slots.by_name.get(name).map_or(0, |s| s.estimate);
        let holding: Vec<&ModelSlot> = slots
            .by_name
            .values()
            .filter(|s| s.holds_memory())
            .collect();
        let holders: Vec<Holder> = holding
            .iter()
            .map(|s| Holder {
                bytes: s.estimate,
                last_used: s.last_used,
                evictable: s.evictable(),
            })
            .collect();
        let victims: Vec<String> = match plan_room(limits, need, &holders) {
            Ok(picked) => picked.iter().map(|&i| holding[i].name.clone()).collect(),
            Err(NoRoom::TooLarge { need, budget }) => {
                return Err(RegistryError::TooLarge {
                    name: name.to_string(),
                    need,
                    budget,
                })
            }
            Err(NoRoom::Busy) => {
                return Err(RegistryError::NoRoom {
                    name: name.to_string(),
                    loaded: holding.len(),
                })
            }
        };
        let mut taken = Vec::new();
        for victim in victims {
            tracing::info!(unloading = %victim, loading = name, "unloading the least recently used idle model to make room");
            taken.extend(slots.by_name.get_mut(&victim).and_then(take_loaded));
        }
        Ok(taken)
    }

    /// Loads `name` on the blocking pool (after stopping `victims`), then publishes the
    /// outcome to the slot and to the requests waiting on `tx`.
    fn spawn_load(
        self: &Arc<Self>,
        name: String,
        path: PathBuf,
        victims: Vec<Arc<ServedModel>>,
        tx: watch::Sender<Option<LoadOutcome>>,
    ) {
        let registry = self.clone();
        tokio::spawn(async move {
            let worker = registry.clone();
            let load_name = name.clone();
            let loading = tokio::task::spawn_blocking(move || {
                for victim in victims {
                    stop_model(victim, worker.options.unload_deadline, &*worker.loader);
                }
                worker.load_now(&load_name, &path)
            });
            let outcome = loading
                .await
                .unwrap_or_else(|_| Err(Arc::from("the load panicked (see the log)")));
            registry.finish_load(&name, &outcome);
            // No receiver left is fine: the slot holds the outcome too.
            let _ = tx.send(Some(outcome));
        });
    }

    /// Loads the model and builds its routes. Blocks.
    fn load_now(&self, name: &str, path: &Path) -> LoadOutcome {
        let started = std::time::Instant::now();
        tracing::info!(model = name, path = %path.display(), "loading the model");
        let state = self.loader.load(name, path).map_err(|e| {
            tracing::error!(model = name, error = %e, "the model failed to load");
            Arc::<str>::from(e.0)
        })?;
        tracing::info!(
            model = name,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "model loaded"
        );
        let router = crate::routes::router(&self.http, state.clone());
        Ok(Arc::new(ServedModel { state, router }))
    }

    /// Moves the slot to its loaded or unloaded phase.
    fn finish_load(&self, name: &str, outcome: &LoadOutcome) {
        let mut slots = self.lock();
        if let Ok(model) = outcome {
            let len = model.state.limits().max_total_tokens;
            slots.max_model_len.insert(name.to_string(), len);
        }
        let Some(slot) = slots.by_name.get_mut(name) else {
            return;
        };
        match outcome {
            Ok(model) => {
                slot.phase = SlotPhase::Loaded(model.clone());
                slot.last_error = None;
                metrics::counter!(MODEL_LOADS_TOTAL, "model_name" => name.to_string()).increment(1);
            }
            Err(reason) => {
                slot.phase = SlotPhase::Unloaded;
                slot.last_error = Some(reason.clone());
            }
        }
        drop(slots);
        self.record_loaded_gauge();
    }

    /// Waits for the load `rx` reports, up to `load_wait`.
    async fn wait(
        &self,
        name: &str,
        mut rx: watch::Receiver<Option<LoadOutcome>>,
    ) -> Result<Arc<ServedModel>, RegistryError> {
        let done = async {
            match rx.wait_for(Option::is_some).await {
                Ok(outcome) => outcome.clone(),
                Err(_) => Some(Err(Arc::from("the load stopped without an outcome"))),
            }
        };
        let outcome = match self.options.load_wait {
            Some(waited) => tokio::time::timeout(waited, done).await.map_err(|_| {
                RegistryError::LoadTimeout {
                    name: name.to_string(),
                    waited,
                }
            })?,
            None => done.await,
        };
        match outcome {
            Some(Ok(model)) => Ok(model),
            Some(Err(reason)) => Err(RegistryError::LoadFailed {
                name: name.to_string(),
                reason,
            }),
            None => Err(RegistryError::LoadFailed {
                name: name.to_string(),
                reason: Arc::from("no outcome"),
            }),
        }
    }

    fn record_loaded_gauge(&self) {
        let slots = self.lock();
        let loaded = slots
            .by_name
            .values()
            .filter(|s| s.state() == ModelState::Loaded)
            .count();
        let bytes: u64 = slots
            .by_name
            .values()
            .filter(|s| s.holds_memory())
            .map(|s| s.estimate)
            .sum();
        drop(slots);
        metrics::gauge!(MODELS_LOADED).set(loaded as f64);
        metrics::gauge!(MODELS_MEMORY_ESTIMATE).set(bytes as f64);
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        // Every change to the slots is a single assignment; a panic elsewhere cannot leave
        // them half-updated.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Moves a loaded slot to unloaded and counts the unload; the caller stops the engine.
/// `None` (nothing changed): the slot was not loaded.
fn take_loaded(slot: &mut ModelSlot) -> Option<Arc<ServedModel>> {
    if !matches!(slot.phase, SlotPhase::Loaded(_)) {
        return None;
    }
    let SlotPhase::Loaded(model) = std::mem::replace(&mut slot.phase, SlotPhase::Unloaded) else {
        return None;
    };
    metrics::counter!(MODEL_UNLOADS_TOTAL, "model_name" => slot.name.clone()).increment(1);
    Some(model)
}

/// Stops a model's engine and waits for its thread, drops the registry's hold on it (the last
/// one: an unloaded model is idle) and tells the loader. Blocks.
fn stop_model(model: Arc<ServedModel>, deadline: Duration, loader: &dyn ModelLoader) {
    let name = model.state.model().model_id.clone();
    model.state.backend().shutdown(deadline);
    drop(model);
    loader.unloaded(&name);
    tracing::info!(model = %name, "model unloaded");
}
