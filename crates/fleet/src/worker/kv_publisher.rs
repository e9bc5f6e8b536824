//! The worker's prefix-cache events, published for the gateways' routers.
//!
//! ```text
//! engine thread ─► bounded channel (batches; a snapshot first and after an overflow)
//!   ─► this task: gather for a moment ─► mirror ─► XADD {p}:kv:{id} MAXLEN ~ STREAM_LEN
//! ```
//!
//! The task keeps a mirror of the engine's cached hashes (at most its KV blocks) so that it
//! can write a snapshot into the stream every [`SNAPSHOT_EVERY`] entries, and after Redis
//! missed some: a gateway that reads the stream from its beginning then always ends with the
//! worker's whole cache (see [`crate::kv_events`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kestrel_engine::kv::kv_event::snapshot;
use kestrel_engine::kv::{BlockHash, KvEvent};
use redis::RedisError;

use super::WorkerShared;
use crate::kv_events::{KvEventEntry, SNAPSHOT_EVERY, STREAM_LEN};
use crate::protocol::FIELD;

/// Batches the engine may hold for this task before it drops one (and owes a snapshot).
const CHANNEL_BATCHES: usize = 256;
/// How long events are gathered into one entry.
const GATHER: Duration = Duration::from_millis(20);
/// The event stream expires this many heartbeat lifetimes after the worker's last beat.
pub const TTL_BEATS: u64 = 10;

/// Publishes the engine's prefix-cache events until the engine stops or the task is aborted.
pub async fn run(shared: Arc<WorkerShared>) {
    let Some(engine) = shared.host.current() else {
        return;
    };
    if shared.prefix_block_size().is_none() {
        return;
    }
    let mut events = engine.watch_kv_events(CHANNEL_BATCHES);
    let mut publisher = Publisher::default();
    while let Some(first) = events.recv().await {
        let mut batch = first;
        tokio::time::sleep(GATHER).await;
        while let Ok(more) = events.try_recv() {
            batch.extend(more);
        }
        publisher.apply(&batch);
        let entry = publisher.next_entry(batch);
        if let Err(e) = append(&shared, &entry).await {
            tracing::warn!(error = %e, "cannot publish prefix-cache events; a snapshot follows");
            publisher.missed();
        }
    }
}

/// The mirror of the engine's cache and when the next snapshot is due.
#[derive(Default)]
struct Publisher {
    cached: HashSet<BlockHash>,
    since_snapshot: usize,
    owes_snapshot: bool,
}

impl Publisher {
    fn apply(&mut self, events: &[KvEvent]) {
        for event in events {
            match event {
                KvEvent::Stored(h) => {
                    self.cached.insert(*h);
                }
                KvEvent::Removed(h) => {
                    self.cached.remove(h);
                }
                KvEvent::AllCleared => self.cached.clear(),
            }
        }
    }

    /// The entry to write for `batch` (already applied): the batch, or a snapshot when one
    /// is due.
    fn next_entry(&mut self, batch: Vec<KvEvent>) -> KvEventEntry {
        let is_snapshot = batch.first() == Some(&KvEvent::AllCleared);
        self.since_snapshot += 1;
        if self.owes_snapshot || (!is_snapshot && self.since_snapshot >= SNAPSHOT_EVERY) {
            self.owes_snapshot = false;
            self.since_snapshot = 0;
            return KvEventEntry::encode(&snapshot(self.cached.iter().copied()));
        }
        if is_snapshot {
            self.since_snapshot = 0;
        }
        KvEventEntry::encode(&batch)
    }

    fn missed(&mut self) {
        self.owes_snapshot = true;
    }
}

async fn append(shared: &WorkerShared, entry: &KvEventEntry) -> Result<(), RedisError> {
    let json = serde_json::to_string(entry).map_err(|e| {
        RedisError::from((redis::ErrorKind::Client, "cannot encode", e.to_string()))
    })?;
    let key = shared.keys.kv_events(&shared.worker_id);
    let ttl_ms = shared.config.heartbeat.as_millis() as u64 * 3 * TTL_BEATS;
    let mut pipe = redis::pipe();
    pipe.cmd("XADD")
        .arg(&key)
        .arg("MAXLEN")
        .arg("~")
        .arg(STREAM_LEN)
        .arg("*")
        .arg(FIELD)
        .arg(json)
        .ignore();
    pipe.cmd("PEXPIRE").arg(&key).arg(ttl_ms).ignore();
    pipe.query_async::<()>(&mut shared.redis.conn()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(x: u32) -> BlockHash {
        BlockHash::new(None, &[x], None, None)
    }

    #[test]
    fn snapshots_come_every_so_often_and_after_a_miss() {
        let mut p = Publisher::default();
        let first = vec![KvEvent::AllCleared, KvEvent::Stored(h(1))];
        p.apply(&first);
        assert_eq!(p.next_entry(first.clone()), KvEventEntry::encode(&first));
        for i in 1..SNAPSHOT_EVERY {
            let batch = vec![KvEvent::Stored(h(100 + i as u32))];
            p.apply(&batch);
            assert_eq!(p.next_entry(batch.clone()), KvEventEntry::encode(&batch));
        }
        let batch = vec![KvEvent::Removed(h(1))];
        p.apply(&batch);
        let snap = p.next_entry(batch).decode();
        assert_eq!(snap[0], KvEvent::AllCleared);
        assert_eq!(
            snap.len(),
            SNAPSHOT_EVERY,
            "every stored block but the removed one"
        );
        assert!(!snap.contains(&KvEvent::Stored(h(1))));
        p.missed();
        let batch = vec![KvEvent::Stored(h(7))];
        p.apply(&batch);
        assert_eq!(p.next_entry(batch).decode()[0], KvEvent::AllCleared);
    }
}
