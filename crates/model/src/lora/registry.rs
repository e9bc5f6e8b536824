//! [`LoraRegistry`]: the adapters loaded beside a base model, by name and by [`AdapterId`].
//! Loading returns a fresh id (ids are never reused, so the engine's prefix cache can key
//! blocks by id); unloading drops the registry's reference, and batches already holding the
//! adapter's `Arc` finish with it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kestrel_engine::adapter_id::AdapterId;

use super::adapter::LoraAdapter;
use super::error::LoraError;

#[derive(Debug, Default)]
pub struct LoraRegistry {
    next_id: u32,
    by_id: BTreeMap<AdapterId, Arc<LoraAdapter>>,
    by_name: HashMap<String, AdapterId>,
}

impl LoraRegistry {
    pub fn new() -> LoraRegistry {
        LoraRegistry::default()
    }

    /// Register `adapter` under its name; a name can be loaded once.
    pub fn load(&mut self, adapter: LoraAdapter) -> Result<AdapterId, LoraError> {
        let name = adapter.name().to_string();
        if self.by_name.contains_key(&name) {
            return Err(LoraError::AlreadyLoaded(name));
        }
        let id = AdapterId(self.next_id);
        self.next_id += 1;
        self.by_id.insert(id, Arc::new(adapter));
        self.by_name.insert(name, id);
        Ok(id)
    }

    /// Register `adapter` under an id the caller allocated (the engine's adapter catalog, which
    /// never reuses ids); refused if the id or the name is taken. Later [`LoraRegistry::load`]
    /// calls allocate past it.
    pub fn insert(&mut self, id: AdapterId, adapter: LoraAdapter) -> Result<(), LoraError> {
        let name = adapter.name().to_string();
        if self.by_name.contains_key(&name) || self.by_id.contains_key(&id) {
            return Err(LoraError::AlreadyLoaded(name));
        }
        self.next_id = self.next_id.max(id.0.saturating_add(1));
        self.by_id.insert(id, Arc::new(adapter));
        self.by_name.insert(name, id);
        Ok(())
    }

    /// Forget adapter `id`; returns it if it was loaded.
    pub fn remove(&mut self, id: AdapterId) -> Option<Arc<LoraAdapter>> {
        let adapter = self.by_id.remove(&id)?;
        self.by_name.remove(adapter.name());
        Some(adapter)
    }

    /// Forget the adapter called `name`; returns the id it had.
    pub fn unload(&mut self, name: &str) -> Result<AdapterId, LoraError> {
        let id = self
            .by_name
            .remove(name)
            .ok_or_else(|| LoraError::NotLoaded(name.to_string()))?;
        self.by_id.remove(&id);
        Ok(id)
    }

    /// The id of the adapter called `name`.
    pub fn id(&self, name: &str) -> Option<AdapterId> {
        self.by_name.get(name).copied()
    }

    pub fn get(&self, id: AdapterId) -> Option<&Arc<LoraAdapter>> {
        self.by_id.get(&id)
    }

    /// The loaded adapters, in load order.
    pub fn iter(&self) -> impl Iterator<Item = (AdapterId, &Arc<LoraAdapter>)> {
        self.by_id.iter().map(|(id, a)| (*id, a))
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}
