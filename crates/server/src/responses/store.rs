//! [`ResponseStore`]: the responses created with `store: true`, kept in memory so that
//! `GET /v1/responses/{id}` returns them and `previous_response_id` continues their
//! conversation.
//!
//! The store is bounded twice: at most [`StoreLimits::max_entries`] responses (the oldest goes
//! first when a new one arrives) and each for at most [`StoreLimits::ttl`]. Entries are kept in
//! insertion order, which is also their expiry order, so both bounds cost O(log n) per insert:
//!
//! ```text
//! by_id:  "resp_a" -> (seq 7, entry)   "resp_b" -> (seq 9, entry)   ...
//! order:  7 -> "resp_a", 9 -> "resp_b", ...       (oldest first: evicted and expired first)
//! ```
//!
//! One store serves a whole process: `kestrel gateway` builds one router per model, and all of
//! them share the store of their [`crate::ServerConfig`], so a response made by one model can
//! be retrieved, deleted or continued through any of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kestrel_model::chat_template::ChatMessage;

use super::wire::ResponseObject;

/// Default [`StoreLimits::max_entries`].
pub const DEFAULT_MAX_ENTRIES: usize = 1024;
/// Default [`StoreLimits::ttl`]: one hour.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// How much the store keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Most responses kept (`--responses-store-size`); 0 keeps none.
    pub max_entries: usize,
    /// How long a response is kept after it was created (`--responses-store-ttl`).
    pub ttl: Duration,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_entries: DEFAULT_MAX_ENTRIES,
            ttl: DEFAULT_TTL,
        }
    }
}

/// A stored response and the conversation that led to it.
#[derive(Debug)]
pub struct StoredResponse {
    /// The response as `GET /v1/responses/{id}` returns it.
    pub response: ResponseObject,
    /// Every turn up to and including the response's own output (its `instructions` left out:
    /// a continuation does not inherit them), as the chat template sees them.
    pub conversation: Vec<ChatMessage>,
}

struct Entry {
    seq: u64,
    created: Instant,
    stored: Arc<StoredResponse>,
}

#[derive(Default)]
struct Entries {
    by_id: HashMap<String, Entry>,
    order: BTreeMap<u64, String>,
    next_seq: u64,
}

/// The stored responses of one server process.
pub struct ResponseStore {
    limits: StoreLimits,
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for ResponseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStore")
            .field("limits", &self.limits)
            .field("len", &self.len())
            .finish()
    }
}

impl Default for ResponseStore {
    fn default() -> Self {
        ResponseStore::new(StoreLimits::default())
    }
}

impl ResponseStore {
    /// An empty store within `limits`.
    pub fn new(limits: StoreLimits) -> ResponseStore {
        ResponseStore {
            limits,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// Its limits.
    pub fn limits(&self) -> StoreLimits {
        self.limits
    }

    /// Keeps `stored` under its response's id, evicting the oldest entry when full.
    pub fn insert(&self, stored: StoredResponse) {
        self.insert_at(stored, Instant::now());
    }

    /// The response `id`, unless it is unknown, deleted, evicted or expired.
    pub fn get(&self, id: &str) -> Option<Arc<StoredResponse>> {
        self.get_at(id, Instant::now())
    }

    /// Forgets the response `id`; whether it was there.
    pub fn remove(&self, id: &str) -> bool {
        let now = Instant::now();
        let mut entries = self.lock();
        expire(&mut entries, self.limits.ttl, now);
        match entries.by_id.remove(id) {
            Some(entry) => {
                entries.order.remove(&entry.seq);
                true
            }
            None => false,
        }
    }

    /// Responses kept (expired ones included until the next access purges them).
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// Whether no response is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert_at(&self, stored: StoredResponse, now: Instant) {
        if self.limits.max_entries == 0 {
            return;
        }
        let mut entries = self.lock();
        expire(&mut entries, self.limits.ttl, now);
        while entries.by_id.len() >= self.limits.max_entries {
            let Some((_, oldest)) = entries.order.pop_first() else {
                break;
            };
            entries.by_id.remove(&oldest);
        }
        let id = stored.response.id.clone();
        let seq = entries.next_seq;
        entries.next_seq += 1;
        let entry = Entry {
            seq,
            created: now,
            stored: Arc::new(stored),
        };
        if let Some(old) = entries.by_id.insert(id.clone(), entry) {
            entries.order.remove(&old.seq);
        }
        entries.order.insert(seq, id);
    }

    fn get_at(&self, id: &str, now: Instant) -> Option<Arc<StoredResponse>> {
        let mut entries = self.lock();
        expire(&mut entries, self.limits.ttl, now);
        entries.by_id.get(id).map(|e| e.stored.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // Every update leaves both maps consistent before it can panic; a poisoned lock still
        // guards a usable store.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drops the entries older than `ttl`, oldest first.
fn expire(entries: &mut Entries, ttl: Duration, now: Instant) {
    while let Some((&seq, id)) = entries.order.first_key_value() {
        let expired = entries
            .by_id
            .get(id)
            .is_none_or(|e| now.saturating_duration_since(e.created) >= ttl);
        if !expired {
            break;
        }
        let id = id.clone();
        entries.order.remove(&seq);
        entries.by_id.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::responses::wire::ResponseObject;

    fn stored(id: &str) -> StoredResponse {
        StoredResponse {
            response: ResponseObject::test_value(id),
            conversation: vec![ChatMessage::new("user", id)],
        }
    }

    fn limits(max_entries: usize, ttl_secs: u64) -> StoreLimits {
        StoreLimits {
            max_entries,
            ttl: Duration::from_secs(ttl_secs),
        }
    }

    #[test]
    fn evicts_the_oldest_when_full() {
        let store = ResponseStore::new(limits(2, 60));
        let t0 = Instant::now();
        for id in ["a", "b", "c"] {
            store.insert_at(stored(id), t0);
        }
        assert_eq!(store.len(), 2);
        assert!(store.get_at("a", t0).is_none());
        assert_eq!(store.get_at("b", t0).unwrap().response.id, "b");
        assert_eq!(
            store.get_at("c", t0).unwrap().conversation[0]
                .content
                .as_deref(),
            Some("c")
        );
    }

    #[test]
    fn expires_after_the_ttl_and_forgets_deleted_ones() {
        let store = ResponseStore::new(limits(10, 60));
        let t0 = Instant::now();
        store.insert_at(stored("old"), t0);
        store.insert_at(stored("new"), t0 + Duration::from_secs(30));
        let later = t0 + Duration::from_secs(61);
        assert!(store.get_at("old", later).is_none());
        assert!(store.get_at("new", later).is_some());
        assert_eq!(store.len(), 1);
        assert!(store.remove("new"));
        assert!(!store.remove("new"));
        assert!(store.is_empty());
    }

    #[test]
    fn a_store_of_size_zero_keeps_nothing_and_reinserting_replaces() {
        let none = ResponseStore::new(limits(0, 60));
        none.insert(stored("a"));
        assert!(none.get("a").is_none());
        let store = ResponseStore::new(limits(2, 60));
        store.insert(stored("a"));
        store.insert(stored("a"));
        store.insert(stored("b"));
        assert_eq!(store.len(), 2);
        assert!(store.get("a").is_some() && store.get("b").is_some());
    }
}
