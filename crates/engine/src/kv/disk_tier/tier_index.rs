//! [`TierIndex`]: which blocks the disk tier holds, how many bytes each file takes, and their
//! least-recently-used order within the tier's byte budget.
//!
//! Once asked to ([`TierIndex::log_changes`]), it logs every block that enters or leaves as a
//! [`KvEvent`], for a router outside the process that needs to know what the tier holds.

use std::collections::{BTreeMap, HashMap};

use crate::kv::{BlockHash, KvEvent};

#[derive(Debug, Clone, Copy)]
struct Entry {
    bytes: u64,
    tick: u64,
}

/// The blocks on disk, in LRU order, within `budget` bytes.
#[derive(Debug)]
pub struct TierIndex {
    entries: HashMap<BlockHash, Entry>,
    /// Use tick -> block: the first entry is the least recently used.
    order: BTreeMap<u64, BlockHash>,
    used: u64,
    budget: u64,
    next_tick: u64,
    /// Blocks that entered (`Stored`) or left (`Removed`), when logged.
    changes: Option<Vec<KvEvent>>,
}

impl TierIndex {
    /// An empty index for a tier of `budget` bytes.
    pub fn new(budget: u64) -> Self {
        TierIndex {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            used: 0,
            budget,
            next_tick: 0,
            changes: None,
        }
    }

    /// Logs the blocks that enter and leave from now on ([`Self::take_changes`]).
    pub fn log_changes(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    /// The blocks that entered or left since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<KvEvent> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Every block held, in no particular order.
    pub fn hashes(&self) -> Vec<BlockHash> {
        self.entries.keys().copied().collect()
    }

    pub fn contains(&self, hash: &BlockHash) -> bool {
        self.entries.contains_key(hash)
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the held files take.
    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Records `hash` as the most recently used block, taking `bytes`; returns the blocks
    /// evicted (least recently used first) to stay within the budget. A file larger than the
    /// whole budget is not kept: it comes back as evicted itself.
    pub fn insert(&mut self, hash: BlockHash, bytes: u64) -> Vec<BlockHash> {
        let held = self.forget(&hash);
        if bytes > self.budget {
            if held {
                self.record(KvEvent::Removed(hash));
            }
            return vec![hash];
        }
        let mut evicted = Vec::new();
        while self.used + bytes > self.budget {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.used -= e.bytes;
            }
            self.record(KvEvent::Removed(oldest));
            evicted.push(oldest);
        }
        let tick = self.tick();
        self.entries.insert(hash, Entry { bytes, tick });
        self.order.insert(tick, hash);
        self.used += bytes;
        if !held {
            self.record(KvEvent::Stored(hash));
        }
        evicted
    }

    /// Marks `hash` as just used (a read); `false` if it is not held.
    pub fn touch(&mut self, hash: &BlockHash) -> bool {
        let tick = self.tick();
        let Some(e) = self.entries.get_mut(hash) else {
            return false;
        };
        self.order.remove(&e.tick);
        e.tick = tick;
        self.order.insert(tick, *hash);
        true
    }

    /// Forgets `hash` (its file was refused or deleted); `false` if it was not held.
    pub fn remove(&mut self, hash: &BlockHash) -> bool {
        let held = self.forget(hash);
        if held {
            self.record(KvEvent::Removed(*hash));
        }
        held
    }

    /// Drops `hash`'s entry without logging; whether it was held.
    fn forget(&mut self, hash: &BlockHash) -> bool {
        match self.entries.remove(hash) {
            Some(e) => {
                self.order.remove(&e.tick);
                self.used -= e.bytes;
                true
            }
            None => false,
        }
    }

    fn record(&mut self, event: KvEvent) {
        if let Some(log) = &mut self.changes {
            log.push(event);
        }
    }

    fn tick(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u32) -> BlockHash {
        BlockHash::new(None, &[i], None, None)
    }

    #[test]
    fn the_least_recently_used_blocks_leave_first() {
        let mut index = TierIndex::new(300);
        assert!(index.insert(h(1), 100).is_empty());
        assert!(index.insert(h(2), 100).is_empty());
        assert!(index.insert(h(3), 100).is_empty());
        assert!(index.touch(&h(1)));
        assert_eq!(index.insert(h(4), 150), vec![h(2), h(3)]);
        assert!(index.contains(&h(1)) && index.contains(&h(4)));
        assert_eq!((index.len(), index.used()), (2, 250));
    }

    #[test]
    fn a_block_larger_than_the_budget_is_not_kept() {
        let mut index = TierIndex::new(100);
        index.insert(h(1), 50);
        assert_eq!(index.insert(h(2), 101), vec![h(2)]);
        assert!(index.contains(&h(1)) && !index.contains(&h(2)));
        assert_eq!(index.used(), 50);
    }

    #[test]
    fn reinserting_and_removing_keep_the_byte_count() {
        let mut index = TierIndex::new(1000);
        index.insert(h(1), 100);
        index.insert(h(1), 120);
        assert_eq!(index.used(), 120);
        assert!(index.remove(&h(1)));
        assert!(!index.remove(&h(1)));
        assert_eq!((index.used(), index.len()), (0, 0));
    }

    #[test]
    fn logged_changes_follow_the_held_set() {
        let mut index = TierIndex::new(200);
        index.insert(h(0), 100);
        index.log_changes();
        index.insert(h(1), 100);
        index.insert(h(1), 100);
        index.insert(h(2), 100);
        index.remove(&h(9));
        index.remove(&h(1));
        index.insert(h(2), 300);
        assert_eq!(
            index.take_changes(),
            vec![
                KvEvent::Stored(h(1)),
                KvEvent::Removed(h(0)),
                KvEvent::Stored(h(2)),
                KvEvent::Removed(h(1)),
                KvEvent::Removed(h(2)),
            ]
        );
        assert!(index.take_changes().is_empty() && index.hashes().is_empty());
    }
}
