//! [`AdapterNames`]: the gateway's ids for the LoRA adapters its workers announce. The
//! server's routes resolve a request's adapter name to an [`AdapterId`] (as on `kestrel
//! serve`); the gateway turns the id back into the name the job carries, and each worker
//! resolves the name to its own loaded adapter. An id, once given to a name, stays its own
//! while the gateway runs (as an engine never reuses one).

use std::collections::BTreeMap;
use std::sync::Mutex;

use kestrel_engine::adapter_id::AdapterId;

/// Name ↔ id of every adapter the gateway has seen announced.
#[derive(Default)]
pub struct AdapterNames {
    ids: Mutex<BTreeMap<String, AdapterId>>,
}

impl AdapterNames {
    /// The id of `name`, given now if it has none yet.
    pub fn id_of(&self, name: &str) -> AdapterId {
        let mut ids = self.lock();
        if let Some(id) = ids.get(name) {
            return *id;
        }
        // Ids start at 1; the map only grows, so its length is the last id given.
        let id = AdapterId(u32::try_from(ids.len() + 1).unwrap_or(u32::MAX));
        ids.insert(name.to_string(), id);
        id
    }

    /// The name `id` was given to.
    pub fn name_of(&self, id: AdapterId) -> Option<String> {
        self.lock()
            .iter()
            .find(|(_, v)| **v == id)
            .map(|(k, _)| k.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, AdapterId>> {
        // A map of plain data; a panic elsewhere cannot leave it half-updated.
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_id_and_ids_are_distinct() {
        let names = AdapterNames::default();
        let a = names.id_of("sql");
        let b = names.id_of("poems");
        assert_ne!(a, b);
        assert_eq!(names.id_of("sql"), a);
        assert_eq!(names.name_of(b).as_deref(), Some("poems"));
        assert_eq!(names.name_of(AdapterId(99)), None);
    }
}
