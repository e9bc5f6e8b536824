//! [`AdapterCatalog`]: the adapters registered with one engine, owned by its thread.
//!
//! ```text
//! register(name, path) ─► new id ─► executor.load_adapter ─► rank check ─► make room
//! acquire(id)  (a request arrives) ─► touch ─► resident? done : load again ─► make room
//!   (loading first: an adapter that fails to load or is refused never evicts another; when
//!    no room can be made, the new load is undone)
//! make room: while resident ≥ max_cpu_loras, evict the least recently used resident adapter
//!            that no live request uses; none ─► NoFreeSlot
//! unregister(name) ─► used by live requests? InUse : executor.unload_adapter, forget it
//! ```
//!
//! An id names one registration: an evicted adapter is loaded again under the same id (same
//! weights, so its prefix-cache blocks stay valid), while unloading and loading a name again
//! gives a new id.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::card::AdapterCard;
use super::error::AdapterError;
use super::limits::LoraLimits;
use crate::adapter_id::AdapterId;
use crate::executor::Executor;

/// Live requests per adapter (running and waiting).
pub type AdapterUses = HashMap<AdapterId, usize>;

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    path: PathBuf,
    rank: usize,
    resident: bool,
    last_used: u64,
}

/// Registered adapters, residency and LRU order.
#[derive(Debug)]
pub struct AdapterCatalog {
    limits: LoraLimits,
    next_id: u32,
    entries: BTreeMap<AdapterId, Entry>,
    clock: u64,
    loads_total: u64,
    evictions_total: u64,
    unloads_total: u64,
}

impl AdapterCatalog {
    pub fn new(limits: LoraLimits) -> AdapterCatalog {
        AdapterCatalog {
            limits,
            next_id: 0,
            entries: BTreeMap::new(),
            clock: 0,
            loads_total: 0,
            evictions_total: 0,
            unloads_total: 0,
        }
    }

    pub fn limits(&self) -> &LoraLimits {
        &self.limits
    }

    /// Registers `name` from `path` and loads it into `exec`.
    pub fn register(
        &mut self,
        name: &str,
        path: &Path,
        exec: &mut dyn Executor,
        uses: &AdapterUses,
    ) -> Result<AdapterCard, AdapterError> {
        if self.id(name).is_some() {
            return Err(AdapterError::AlreadyLoaded(name.to_string()));
        }
        let id = AdapterId(self.next_id);
        let mut entry = Entry {
            name: name.to_string(),
            path: path.to_path_buf(),
            rank: 0,
            resident: false,
            last_used: 0,
        };
        entry.rank = self.load(id, &entry, exec, uses)?;
        self.next_id += 1;
        entry.resident = true;
        entry.last_used = self.tick();
        self.entries.insert(id, entry);
        self.card(id)
            .ok_or_else(|| AdapterError::NotFound(name.to_string()))
    }

    /// Forgets `name`, unloading it from `exec`; refused while live requests use it.
    pub fn unregister(
        &mut self,
        name: &str,
        exec: &mut dyn Executor,
        uses: &AdapterUses,
    ) -> Result<AdapterId, AdapterError> {
        let id = self
            .id(name)
            .ok_or_else(|| AdapterError::NotFound(name.to_string()))?;
        let requests = uses.get(&id).copied().unwrap_or(0);
        if requests > 0 {
            return Err(AdapterError::InUse {
                name: name.to_string(),
                requests,
            });
        }
        if let Some(entry) = self.entries.remove(&id) {
            if entry.resident {
                exec.unload_adapter(id);
            }
        }
        self.unloads_total += 1;
        Ok(id)
    }

    /// Makes adapter `id` resident for a new request (loading it again if it was evicted) and
    /// marks it most recently used.
    pub fn acquire(
        &mut self,
        id: AdapterId,
        exec: &mut dyn Executor,
        uses: &AdapterUses,
    ) -> Result<(), AdapterError> {
        let entry = self
            .entries
            .get(&id)
            .cloned()
            .ok_or_else(|| AdapterError::NotFound(id.to_string()))?;
        if !entry.resident {
            self.load(id, &entry, exec, uses)?;
        }
        let now = self.tick();
        if let Some(e) = self.entries.get_mut(&id) {
            e.resident = true;
            e.last_used = now;
        }
        Ok(())
    }

    /// The id of the adapter called `name`.
    pub fn id(&self, name: &str) -> Option<AdapterId> {
        self.entries
            .iter()
            .find(|(_, e)| e.name == name)
            .map(|(id, _)| *id)
    }

    /// The name of adapter `id`.
    pub fn name(&self, id: AdapterId) -> Option<&str> {
        self.entries.get(&id).map(|e| e.name.as_str())
    }

    /// Every registered adapter, in registration order.
    pub fn cards(&self) -> Vec<AdapterCard> {
        self.entries
            .keys()
            .filter_map(|&id| self.card(id))
            .collect()
    }

    /// Adapters loaded into the executor so far (evicted ones loaded again count again).
    pub fn loads_total(&self) -> u64 {
        self.loads_total
    }

    /// Adapters unregistered.
    pub fn unloads_total(&self) -> u64 {
        self.unloads_total
    }

    /// Adapters evicted to make room.
    pub fn evictions_total(&self) -> u64 {
        self.evictions_total
    }

    fn card(&self, id: AdapterId) -> Option<AdapterCard> {
        self.entries.get(&id).map(|e| AdapterCard {
            id,
            name: e.name.clone(),
            path: e.path.clone(),
            rank: e.rank,
            resident: e.resident,
        })
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Loads `entry` into `exec` as `id`, checks its rank and makes room for it (undoing the
    /// load if there is none); returns the rank.
    fn load(
        &mut self,
        id: AdapterId,
        entry: &Entry,
        exec: &mut dyn Executor,
        uses: &AdapterUses,
    ) -> Result<usize, AdapterError> {
        let rank = exec
            .load_adapter(id, &entry.name, &entry.path)
            .map_err(|e| AdapterError::Load {
                name: entry.name.clone(),
                reason: e.to_string(),
            })?;
        if rank > self.limits.max_lora_rank {
            exec.unload_adapter(id);
            return Err(AdapterError::RankTooLarge {
                name: entry.name.clone(),
                rank,
                max: self.limits.max_lora_rank,
            });
        }
        if let Err(e) = self.make_room(&entry.name, exec, uses) {
            exec.unload_adapter(id);
            return Err(e);
        }
        self.loads_total += 1;
        Ok(rank)
    }

    /// Evicts least recently used, unused adapters until one more fits `max_cpu_loras`.
    fn make_room(
        &mut self,
        name: &str,
        exec: &mut dyn Executor,
        uses: &AdapterUses,
    ) -> Result<(), AdapterError> {
        while self.entries.values().filter(|e| e.resident).count() >= self.limits.max_cpu_loras {
            let victim = self
                .entries
                .iter()
                .filter(|(id, e)| e.resident && uses.get(id).copied().unwrap_or(0) == 0)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(id, _)| *id);
            let Some(victim) = victim else {
                return Err(AdapterError::NoFreeSlot {
                    name: name.to_string(),
                    max_cpu_loras: self.limits.max_cpu_loras,
                });
            };
            exec.unload_adapter(victim);
            if let Some(e) = self.entries.get_mut(&victim) {
                e.resident = false;
            }
            self.evictions_total += 1;
        }
        Ok(())
    }
}
