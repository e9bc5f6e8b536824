//! [`ModelRegistry`]: the models one `kestrel serve` process may serve, by name, each in a
//! [`ModelSlot`]. A model is loaded when a request first names it (through the caller's
//! [`ModelLoader`], which builds its engine as the single-model path does) and gets its own
//! engine thread, KV cache and routes; every engine shares the process's inference pool.
//!
//! At most `max_loaded` models hold memory at once. Loading another unloads the least
//! recently used idle one (no request waiting for it, queued or running) that is not pinned;
//! when every loaded model is busy or pinned the request is refused at once
//! ([`RegistryError::NoRoom`], a 503 with `Retry-After`). Requests for a model being loaded
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
use crate::model_slot::{ActiveGuard, LoadOutcome, ModelSlot, ModelState, ServedModel, SlotPhase};
use crate::state::AppState;

/// Counter, labelled `model_name`: models loaded (first loads and reloads).
pub const MODEL_LOADS_TOTAL: &str = "kestrel:model_loads_total";
/// Counter, labelled `model_name`: models unloaded (to make room, or asked for).
pub const MODEL_UNLOADS_TOTAL: &str = "kestrel:model_unloads_total";
/// Gauge: models loaded now.
pub const MODELS_LOADED: &str = "kestrel:models_loaded";

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
}

/// Why a model could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoadFailure(pub String);

/// Loads a model and starts its engine.
pub trait ModelLoader: Send + Sync + 'static {
    /// The routes' state of the model at `path`, served as `name`. Blocks for the load.
    fn load(&self, name: &str, path: &Path) -> Result<AppState, LoadFailure>;
}

/// Why a request cannot have its model.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error("the model `{0}` does not exist (GET /v1/models lists the served models)")]
    Unknown(String),
    #[error("cannot load the model `{name}` now: {loaded} models are loaded (--max-loaded-models) and each is busy or pinned; retry later")]
    NoRoom { name: String, loaded: usize },
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
            let pinned = pins.contains(&m.name);
            order.push(m.name.clone());
            by_name.insert(m.name.clone(), ModelSlot::new(m.name, m.path, pinned));
        }
        if let Some(p) = pins.iter().find(|p| !by_name.contains_key(*p)) {
            return Err(RegistryConfigError::UnknownPin(p.clone()));
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

    /// Every model in the order given, with its state.
    pub fn listing(&self) -> Vec<ModelListing> {
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
                })
            })
            .collect()
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

    /// The model `name`, loading it first if needed (unloading an idle one to make room).
    pub async fn acquire(self: &Arc<Self>, name: &str) -> Result<Lease, RegistryError> {
        let (step, guard) = self.begin(name)?;
        let model = match step {
            Step::Ready(model) => model,
            Step::Wait(rx) => self.wait(name, rx).await?,
        };
        Ok(Lease { model, guard })
    }

    /// Unloads `name` if it is loaded and idle; `false`: it was not loaded.
    pub async fn unload(&self, name: &str) -> Result<bool, RegistryError> {
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
        let deadline = self.options.unload_deadline;
        let stopped = tokio::task::spawn_blocking(move || stop_model(model, deadline)).await;
        if stopped.is_err() {
            tracing::error!(model = name, "stopping the model's engine panicked");
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
        let victim = self.make_room(&mut slots, name)?;
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
        self.spawn_load(name.to_string(), path, victim, tx);
        Ok((Step::Wait(rx), guard))
    }

    /// The loaded model to unload so that `name` may load (`None`: there is room already).
    fn make_room(
        &self,
        slots: &mut MutexGuard<'_, Slots>,
        name: &str,
    ) -> Result<Option<Arc<ServedModel>>, RegistryError> {
        let holding = slots.by_name.values().filter(|s| s.holds_memory()).count();
        if holding < self.options.max_loaded {
            return Ok(None);
        }
        let no_room = || RegistryError::NoRoom {
            name: name.to_string(),
            loaded: holding,
        };
        let victim = slots
            .by_name
            .values_mut()
            .filter(|s| s.evictable())
            .min_by_key(|s| s.last_used)
            .ok_or_else(no_room)?;
        tracing::info!(unloading = %victim.name, loading = name, "unloading the least recently used idle model to make room");
        take_loaded(victim).map(Some).ok_or_else(no_room)
    }

    /// Loads `name` on the blocking pool (after stopping `victim`), then publishes the
    /// outcome to the slot and to the requests waiting on `tx`.
    fn spawn_load(
        self: &Arc<Self>,
        name: String,
        path: PathBuf,
        victim: Option<Arc<ServedModel>>,
        tx: watch::Sender<Option<LoadOutcome>>,
    ) {
        let registry = self.clone();
        tokio::spawn(async move {
            let worker = registry.clone();
            let load_name = name.clone();
            let loading = tokio::task::spawn_blocking(move || {
                if let Some(victim) = victim {
                    stop_model(victim, worker.options.unload_deadline);
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
        let loaded = self
            .lock()
            .by_name
            .values()
            .filter(|s| s.state() == ModelState::Loaded)
            .count();
        metrics::gauge!(MODELS_LOADED).set(loaded as f64);
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

/// Stops a model's engine and waits for its thread, so that its memory is freed once the
/// last request's lease drops. Blocks.
fn stop_model(model: Arc<ServedModel>, deadline: Duration) {
    let name = model.state.model().model_id.clone();
    model.state.backend().shutdown(deadline);
    tracing::info!(model = %name, "model unloaded");
}
