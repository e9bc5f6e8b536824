//! [`PrefixIndex`]: which workers hold which prefix-cache blocks, as their published events
//! ([`crate::kv_events`]) tell. The router asks it how long a prompt's cached prefix is on each
//! worker ([`PrefixIndex::matched_blocks`]).
//!
//! ```text
//! blocks:  hash ─► workers holding it (and when it entered the index)
//! workers: id   ─► its hashes (to clear or forget a worker without a scan)
//! order:   (hash, stamp) oldest first: past `max_blocks` hashes the oldest is dropped
//! ```
//!
//! Bounded: at most `max_blocks` distinct hashes; a new one beyond that drops the hash that
//! entered first (its workers still hold it; the index just stops knowing, until their next
//! snapshot says so again). A hash that leaves and comes back gets a new stamp, so a stale
//! `order` entry is recognised and skipped.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use kestrel_engine::kv::{BlockHash, KvEvent};

/// The workers holding one block.
#[derive(Debug)]
struct Holders {
    workers: Vec<Arc<str>>,
    stamp: u64,
}

/// Block hash -> workers, bounded (see the module docs).
#[derive(Debug)]
pub struct PrefixIndex {
    max_blocks: usize,
    blocks: HashMap<BlockHash, Holders>,
    workers: HashMap<Arc<str>, HashSet<BlockHash>>,
    order: VecDeque<(BlockHash, u64)>,
    next_stamp: u64,
}

impl PrefixIndex {
    /// An empty index of at most `max_blocks` hashes (at least 1).
    pub fn new(max_blocks: usize) -> PrefixIndex {
        PrefixIndex {
            max_blocks: max_blocks.max(1),
            blocks: HashMap::new(),
            workers: HashMap::new(),
            order: VecDeque::new(),
            next_stamp: 0,
        }
    }

    /// Distinct hashes known.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Workers with at least one block known.
    pub fn num_workers(&self) -> usize {
        self.workers.values().filter(|b| !b.is_empty()).count()
    }

    /// Applies `worker`'s events, in order.
    pub fn apply(&mut self, worker: &str, events: &[KvEvent]) {
        for event in events {
            match event {
                KvEvent::Stored(h) => self.stored(worker, *h),
                KvEvent::Removed(h) => self.removed(worker, *h),
                KvEvent::AllCleared => self.forget(worker),
            }
        }
    }

    /// `worker` holds `hash`.
    pub fn stored(&mut self, worker: &str, hash: BlockHash) {
        let worker = self.worker_key(worker);
        if !self.blocks.contains_key(&hash) {
            self.make_room();
            let stamp = self.next_stamp;
            self.next_stamp += 1;
            self.order.push_back((hash, stamp));
            let holders = Holders {
                workers: Vec::new(),
                stamp,
            };
            self.blocks.insert(hash, holders);
        }
        let Some(holders) = self.blocks.get_mut(&hash) else {
            return;
        };
        if !holders.workers.contains(&worker) {
            holders.workers.push(worker.clone());
        }
        self.workers.entry(worker).or_default().insert(hash);
        self.compact();
    }

    /// `worker` no longer holds `hash`.
    pub fn removed(&mut self, worker: &str, hash: BlockHash) {
        if let Some(blocks) = self.workers.get_mut(worker) {
            blocks.remove(&hash);
        }
        self.drop_holder(hash, worker);
    }

    /// Forgets every block of `worker` (its cache was cleared, or it is gone).
    pub fn forget(&mut self, worker: &str) {
        let Some(blocks) = self.workers.remove(worker) else {
            return;
        };
        for hash in blocks {
            self.drop_holder(hash, worker);
        }
    }

    /// How many of `hashes`, from the first, `worker` holds without a gap.
    pub fn matched_blocks(&self, worker: &str, hashes: &[BlockHash]) -> usize {
        let Some(blocks) = self.workers.get(worker) else {
            return 0;
        };
        hashes.iter().take_while(|h| blocks.contains(h)).count()
    }

    /// The shared name of `worker` (one allocation per worker, not per block).
    fn worker_key(&mut self, worker: &str) -> Arc<str> {
        match self.workers.get_key_value(worker) {
            Some((key, _)) => key.clone(),
            None => Arc::from(worker),
        }
    }

    fn drop_holder(&mut self, hash: BlockHash, worker: &str) {
        let Some(holders) = self.blocks.get_mut(&hash) else {
            return;
        };
        holders.workers.retain(|w| &**w != worker);
        if holders.workers.is_empty() {
            self.blocks.remove(&hash);
        }
    }

    /// Drops the oldest hashes until a new one fits.
    fn make_room(&mut self) {
        while self.blocks.len() >= self.max_blocks {
            let Some((hash, stamp)) = self.order.pop_front() else {
                return;
            };
            if self.blocks.get(&hash).is_none_or(|h| h.stamp != stamp) {
                continue;
            }
            if let Some(holders) = self.blocks.remove(&hash) {
                for w in holders.workers {
                    if let Some(blocks) = self.workers.get_mut(&*w) {
                        blocks.remove(&hash);
                    }
                }
            }
        }
    }

    /// Drops stale `order` entries once they outnumber the live ones.
    fn compact(&mut self) {
        if self.order.len() <= 2 * self.blocks.len().max(1024) {
            return;
        }
        let blocks = &self.blocks;
        self.order
            .retain(|(h, stamp)| blocks.get(h).is_some_and(|b| b.stamp == *stamp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(x: u32) -> BlockHash {
        BlockHash::new(None, &[x], None, None)
    }

    #[test]
    fn stores_removes_and_clears_per_worker() {
        let mut index = PrefixIndex::new(100);
        index.apply(
            "a",
            &[
                KvEvent::Stored(h(1)),
                KvEvent::Stored(h(2)),
                KvEvent::Stored(h(3)),
            ],
        );
        index.apply("b", &[KvEvent::Stored(h(1))]);
        assert_eq!((index.num_blocks(), index.num_workers()), (3, 2));
        let prompt = [h(1), h(2), h(3), h(4)];
        assert_eq!(index.matched_blocks("a", &prompt), 3);
        assert_eq!(index.matched_blocks("b", &prompt), 1);
        assert_eq!(index.matched_blocks("c", &prompt), 0);
        index.apply("a", &[KvEvent::Removed(h(2))]);
        assert_eq!(
            index.matched_blocks("a", &prompt),
            1,
            "a gap ends the match"
        );
        assert_eq!(index.num_blocks(), 2);
        index.apply("b", &[KvEvent::AllCleared]);
        assert_eq!(index.matched_blocks("b", &prompt), 0);
        assert_eq!((index.num_blocks(), index.num_workers()), (2, 1));
        // A snapshot: clear, then the whole cache.
        index.apply("a", &[KvEvent::AllCleared, KvEvent::Stored(h(9))]);
        assert_eq!(index.matched_blocks("a", &prompt), 0);
        assert_eq!(index.num_blocks(), 1);
    }

    #[test]
    fn forgetting_a_worker_keeps_the_others_blocks() {
        let mut index = PrefixIndex::new(100);
        index.apply("a", &[KvEvent::Stored(h(1)), KvEvent::Stored(h(2))]);
        index.apply("b", &[KvEvent::Stored(h(1))]);
        index.forget("a");
        assert_eq!(index.matched_blocks("a", &[h(1)]), 0);
        assert_eq!(index.matched_blocks("b", &[h(1)]), 1);
        assert_eq!((index.num_blocks(), index.num_workers()), (1, 1));
        index.forget("b");
        index.forget("nobody");
        assert_eq!((index.num_blocks(), index.num_workers()), (0, 0));
    }

    #[test]
    fn the_oldest_hash_is_dropped_past_the_bound() {
        let mut index = PrefixIndex::new(3);
        for x in 1..=3 {
            index.stored("a", h(x));
        }
        // h(1) leaves and comes back: it is now the newest.
        index.removed("a", h(1));
        index.stored("a", h(1));
        index.stored("b", h(4));
        assert_eq!(index.num_blocks(), 3);
        assert_eq!(index.matched_blocks("a", &[h(2)]), 0, "the oldest went");
        assert_eq!(index.matched_blocks("a", &[h(1)]), 1);
        assert_eq!(index.matched_blocks("a", &[h(3)]), 1);
        assert_eq!(index.matched_blocks("b", &[h(4)]), 1);
        for x in 10..5000 {
            index.stored("c", h(x));
        }
        assert_eq!(index.num_blocks(), 3);
        assert!(
            index.order.len() <= 2 * 1024 + 1,
            "stale entries are compacted"
        );
    }
}
