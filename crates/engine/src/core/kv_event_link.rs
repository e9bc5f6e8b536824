//! [`KvEventLink`]: hands the prefix cache's [`KvEvent`]s to a reader outside the engine thread
//! (a fleet worker that publishes them for its gateway's router).
//!
//! ```text
//! engine thread: step ─► ... ─► publish: take_kv_events ─► try_send(batch) ─► bounded channel
//! reader (async): recv(batch) ─► its own batching and I/O
//! ```
//!
//! The engine thread never waits on the reader: a batch that does not fit in the channel is
//! dropped and the link owes the reader a snapshot ([`crate::kv::kv_event::snapshot`]: every
//! cached hash after an `AllCleared`), sent in place of the next batch that fits. The first
//! batch a new reader gets is such a snapshot.
//!
//! With a disk tier under the prefix cache, a block the engine can serve without computing it
//! is one in RAM *or* on disk (a disk hit is read back before the prefill), so the reader is
//! told about that union: a block evicted from RAM but kept on disk is not `Removed`, and after
//! a restart the first snapshot already holds what the tier kept. The link remembers what it
//! told the reader and sends, for each block either tier changed, the difference.

use std::collections::HashSet;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::Sender;

use crate::kv::disk_tier::DiskTier;
use crate::kv::kv_event::snapshot;
use crate::kv::{BlockHash, KvCacheManager, KvEvent};

/// The engine's end of a KV-event channel.
pub struct KvEventLink {
    sink: Sender<Vec<KvEvent>>,
    /// Whether the reader missed events and needs the whole cache again.
    owes_snapshot: bool,
    /// With a disk tier: the blocks the reader was told of (RAM ∪ disk).
    told: Option<HashSet<BlockHash>>,
}

impl KvEventLink {
    /// Links `sink` to `kv`'s prefix cache and to `tier` under it, which start logging their
    /// changes.
    pub fn new(
        sink: Sender<Vec<KvEvent>>,
        kv: &mut KvCacheManager,
        tier: Option<&DiskTier>,
    ) -> KvEventLink {
        kv.log_kv_events();
        kv.take_kv_events();
        if let Some(tier) = tier {
            tier.log_events();
            tier.take_events();
        }
        KvEventLink {
            sink,
            owes_snapshot: true,
            told: tier.map(|_| HashSet::new()),
        }
    }

    /// Sends the changes since the last call (or a snapshot, when one is owed) without
    /// waiting; false once the reader is gone. `tier` is the one the link was made with.
    pub fn publish(&mut self, kv: &mut KvCacheManager, tier: Option<&DiskTier>) -> bool {
        let events = self.changes(kv, tier);
        let batch = if self.owes_snapshot {
            self.snapshot(kv, tier)
        } else if events.is_empty() {
            return true;
        } else {
            events
        };
        match self.sink.try_send(batch) {
            Ok(()) => {
                self.owes_snapshot = false;
                true
            }
            Err(TrySendError::Full(_)) => {
                self.owes_snapshot = true;
                true
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }

    /// What changed for the reader since the last call: the prefix cache's own events, or
    /// with a tier the changes to the union of both (a cleared RAM cache owes a snapshot).
    fn changes(&mut self, kv: &mut KvCacheManager, tier: Option<&DiskTier>) -> Vec<KvEvent> {
        let ram = kv.take_kv_events();
        let (Some(tier), Some(told)) = (tier, self.told.as_mut()) else {
            return ram;
        };
        let disk = tier.take_events();
        if ram.contains(&KvEvent::AllCleared) {
            self.owes_snapshot = true;
            return Vec::new();
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for hash in ram.iter().chain(&disk).filter_map(event_hash) {
            if !seen.insert(hash) {
                continue;
            }
            let held = kv.is_cached(&hash) || tier.contains(&hash);
            if held && told.insert(hash) {
                out.push(KvEvent::Stored(hash));
            } else if !held && told.remove(&hash) {
                out.push(KvEvent::Removed(hash));
            }
        }
        out
    }

    /// Every block the reader should know of, after an `AllCleared`.
    fn snapshot(&mut self, kv: &KvCacheManager, tier: Option<&DiskTier>) -> Vec<KvEvent> {
        let mut hashes = kv.cached_hashes();
        if let (Some(tier), Some(told)) = (tier, self.told.as_mut()) {
            let ram: HashSet<BlockHash> = hashes.iter().copied().collect();
            hashes.extend(tier.hashes().into_iter().filter(|h| !ram.contains(h)));
            *told = hashes.iter().copied().collect();
        }
        snapshot(hashes)
    }
}

/// The block an event names (none for `AllCleared`).
fn event_hash(event: &KvEvent) -> Option<BlockHash> {
    match event {
        KvEvent::Stored(h) | KvEvent::Removed(h) => Some(*h),
        KvEvent::AllCleared => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{BlockHash, KvCacheConfig};

    fn h(x: u32) -> BlockHash {
        BlockHash::new(None, &[x], None, None)
    }

    #[test]
    fn a_reader_gets_a_snapshot_then_changes_and_a_snapshot_after_an_overflow() {
        let mut kv = KvCacheManager::new(KvCacheConfig::new(4)).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let mut link = KvEventLink::new(tx, &mut kv, None);
        assert!(link.publish(&mut kv, None));
        assert_eq!(rx.try_recv().unwrap(), vec![KvEvent::AllCleared]);
        assert!(link.publish(&mut kv, None), "nothing new: nothing sent");
        assert!(rx.try_recv().is_err());
        kv.adopt_block(h(1), |_| true);
        assert!(link.publish(&mut kv, None));
        assert_eq!(rx.try_recv().unwrap(), vec![KvEvent::Stored(h(1))]);
        // The channel holds one batch: the second is dropped, and a snapshot is owed.
        kv.adopt_block(h(2), |_| true);
        assert!(link.publish(&mut kv, None));
        kv.adopt_block(h(3), |_| true);
        assert!(link.publish(&mut kv, None));
        assert_eq!(rx.try_recv().unwrap(), vec![KvEvent::Stored(h(2))]);
        assert!(link.publish(&mut kv, None));
        let mut snap = rx.try_recv().unwrap();
        assert_eq!(snap.remove(0), KvEvent::AllCleared);
        snap.sort_by_key(|e| match e {
            KvEvent::Stored(h) => *h,
            _ => unreachable!("a snapshot holds stores only"),
        });
        let mut want = vec![h(1), h(2), h(3)];
        want.sort();
        assert_eq!(
            snap,
            want.into_iter().map(KvEvent::Stored).collect::<Vec<_>>()
        );
        drop(rx);
        kv.adopt_block(h(4), |_| true);
        assert!(!link.publish(&mut kv, None), "the reader is gone");
    }
}
