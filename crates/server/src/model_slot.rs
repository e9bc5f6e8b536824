//! [`ModelSlot`]: one model a multi-model server may serve: its name, where its weights are,
//! whether it is pinned, and its [`SlotPhase`] (unloaded, loading, loaded). The
//! [`crate::model_registry::ModelRegistry`] owns the slots and moves them between phases; a
//! slot only records what is true of it.
//!
//! ```text
//!            acquire (room, or an idle unpinned model unloaded)
//! Unloaded ───────────────► Loading ──ok──► Loaded ──unload / evicted──► Unloaded
//!     ▲                        │
//!     └────── load failed ─────┘   (the waiting requests get the error)
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use tokio::sync::watch;

use crate::state::AppState;

/// A loaded model: its routes' state and the routes themselves.
pub struct ServedModel {
    pub state: AppState,
    pub router: Router,
}

/// The end of a load: the model, or why it could not be loaded.
pub type LoadOutcome = Result<Arc<ServedModel>, Arc<str>>;

/// What a slot holds now.
pub enum SlotPhase {
    Unloaded,
    /// Being loaded; the receiver yields the outcome once (`None` until then).
    Loading(watch::Receiver<Option<LoadOutcome>>),
    Loaded(Arc<ServedModel>),
}

/// A slot's phase as `/v1/models` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelState {
    Unloaded,
    Loading,
    Loaded,
}

impl ModelState {
    /// `unloaded`, `loading` or `loaded`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelState::Unloaded => "unloaded",
            ModelState::Loading => "loading",
            ModelState::Loaded => "loaded",
        }
    }

    /// The state named `s` ([`ModelState::as_str`]'s names); `None` for any other text.
    pub fn parse(s: &str) -> Option<ModelState> {
        [
            ModelState::Unloaded,
            ModelState::Loading,
            ModelState::Loaded,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }

    /// How soon a request can start on a model in this state: 0 loaded, 1 loading, 2
    /// unloaded (a router prefers the lower).
    pub fn start_rank(self) -> u8 {
        match self {
            ModelState::Loaded => 0,
            ModelState::Loading => 1,
            ModelState::Unloaded => 2,
        }
    }
}

/// One servable model.
pub struct ModelSlot {
    /// The name requests give as `model`.
    pub name: String,
    /// The GGUF file or checkpoint directory.
    pub path: PathBuf,
    /// Never unloaded (`--pin`).
    pub pinned: bool,
    /// The memory it is expected to take once loaded (weights file + KV cache share).
    pub estimate: u64,
    pub phase: SlotPhase,
    /// When a request last chose this model (least recently used goes first).
    pub last_used: Instant,
    /// Requests holding the model: waiting for its load, queued or running.
    active: Arc<AtomicUsize>,
    /// Why the last load failed, until a load succeeds.
    pub last_error: Option<Arc<str>>,
}

impl ModelSlot {
    /// An unloaded slot.
    pub fn new(name: String, path: PathBuf, pinned: bool) -> ModelSlot {
        ModelSlot {
            name,
            path,
            pinned,
            estimate: 0,
            phase: SlotPhase::Unloaded,
            last_used: Instant::now(),
            active: Arc::new(AtomicUsize::new(0)),
            last_error: None,
        }
    }

    /// The phase, as reported.
    pub fn state(&self) -> ModelState {
        match self.phase {
            SlotPhase::Unloaded => ModelState::Unloaded,
            SlotPhase::Loading(_) => ModelState::Loading,
            SlotPhase::Loaded(_) => ModelState::Loaded,
        }
    }

    /// Whether the slot holds engine memory (loaded, or being loaded).
    pub fn holds_memory(&self) -> bool {
        !matches!(self.phase, SlotPhase::Unloaded)
    }

    /// Whether no request holds the model.
    pub fn is_idle(&self) -> bool {
        self.active.load(Ordering::Acquire) == 0
    }

    /// Whether the model may be unloaded to make room now: loaded, idle and not pinned.
    pub fn evictable(&self) -> bool {
        !self.pinned && self.is_idle() && matches!(self.phase, SlotPhase::Loaded(_))
    }

    /// Marks a request as holding the model until the returned guard drops.
    pub fn hold(&mut self) -> ActiveGuard {
        self.last_used = Instant::now();
        self.active.fetch_add(1, Ordering::AcqRel);
        ActiveGuard {
            active: self.active.clone(),
        }
    }
}

/// One request's hold on a model: while any is alive the model is not unloaded.
pub struct ActiveGuard {
    active: Arc<AtomicUsize>,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_model_is_not_idle_until_every_guard_drops() {
        let mut slot = ModelSlot::new("a".into(), "a.gguf".into(), false);
        assert!(slot.is_idle());
        let first = slot.hold();
        let second = slot.hold();
        drop(first);
        assert!(!slot.is_idle());
        drop(second);
        assert!(slot.is_idle());
    }

    #[test]
    fn only_loaded_idle_unpinned_models_are_evictable() {
        let mut slot = ModelSlot::new("a".into(), "a.gguf".into(), false);
        assert!(!slot.evictable(), "an unloaded model holds nothing to free");
        let (_tx, rx) = watch::channel(None);
        slot.phase = SlotPhase::Loading(rx);
        assert!(!slot.evictable(), "a loading model is not evicted");
        assert_eq!(slot.state(), ModelState::Loading);
        assert!(slot.holds_memory());
    }
}
