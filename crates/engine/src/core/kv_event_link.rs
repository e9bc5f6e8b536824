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

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::Sender;

use crate::kv::kv_event::snapshot;
use crate::kv::{KvCacheManager, KvEvent};

/// The engine's end of a KV-event channel.
pub struct KvEventLink {
    sink: Sender<Vec<KvEvent>>,
    /// Whether the reader missed events and needs the whole cache again.
    owes_snapshot: bool,
}

impl KvEventLink {
    /// Links `sink` to `kv`'s prefix cache, which starts logging its changes.
    pub fn new(sink: Sender<Vec<KvEvent>>, kv: &mut KvCacheManager) -> KvEventLink {
        kv.log_kv_events();
        kv.take_kv_events();
        KvEventLink {
            sink,
            owes_snapshot: true,
        }
    }

    /// Sends the changes since the last call (or a snapshot, when one is owed) without
    /// waiting; false once the reader is gone.
    pub fn publish(&mut self, kv: &mut KvCacheManager) -> bool {
        let events = kv.take_kv_events();
        let batch = if self.owes_snapshot {
            snapshot(kv.cached_hashes())
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
        let mut link = KvEventLink::new(tx, &mut kv);
        assert!(link.publish(&mut kv));
        assert_eq!(rx.try_recv().unwrap(), vec![KvEvent::AllCleared]);
        assert!(link.publish(&mut kv), "nothing new: nothing sent");
        assert!(rx.try_recv().is_err());
        kv.adopt_block(h(1), |_| true);
        assert!(link.publish(&mut kv));
        assert_eq!(rx.try_recv().unwrap(), vec![KvEvent::Stored(h(1))]);
        // The channel holds one batch: the second is dropped, and a snapshot is owed.
        kv.adopt_block(h(2), |_| true);
        assert!(link.publish(&mut kv));
        kv.adopt_block(h(3), |_| true);
        assert!(link.publish(&mut kv));
        assert_eq!(rx.try_recv().unwrap(), vec![KvEvent::Stored(h(2))]);
        assert!(link.publish(&mut kv));
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
        assert!(!link.publish(&mut kv), "the reader is gone");
    }
}
