//! The prefix-cache events a worker publishes for the gateways' routers, as they travel in its
//! stream [`crate::keys::Keys::kv_events`] (field [`crate::protocol::FIELD`], JSON):
//!
//! ```text
//! {"events":[{"stored":["<64 hex>", ...]}, {"removed":["<64 hex>", ...]}, "all_cleared"]}
//! ```
//!
//! Runs of one kind are grouped; order is kept. An entry that begins with `all_cleared` and
//! stores the rest is a snapshot: the worker's cache holds exactly those blocks. The worker
//! writes one at its start and every [`SNAPSHOT_EVERY`] entries, and trims its stream to about
//! [`STREAM_LEN`] entries, so a reader that starts at the beginning of the stream always
//! passes a snapshot and ends with the worker's whole cache.

use kestrel_engine::kv::{BlockHash, KvEvent};
use serde::{Deserialize, Serialize};

/// Entries between two snapshots.
pub const SNAPSHOT_EVERY: usize = 256;
/// About how many entries a worker's event stream keeps (`XADD MAXLEN ~`).
pub const STREAM_LEN: usize = 4 * SNAPSHOT_EVERY;

/// One stream entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEventEntry {
    pub events: Vec<KvEventRun>,
}

/// A run of events of one kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvEventRun {
    Stored(Vec<String>),
    Removed(Vec<String>),
    AllCleared,
}

impl KvEventEntry {
    /// The entry for `events`, grouping runs of one kind.
    pub fn encode(events: &[KvEvent]) -> KvEventEntry {
        let mut runs: Vec<KvEventRun> = Vec::new();
        for event in events {
            match (event, runs.last_mut()) {
                (KvEvent::Stored(h), Some(KvEventRun::Stored(run))) => run.push(h.to_hex()),
                (KvEvent::Removed(h), Some(KvEventRun::Removed(run))) => run.push(h.to_hex()),
                (KvEvent::Stored(h), _) => runs.push(KvEventRun::Stored(vec![h.to_hex()])),
                (KvEvent::Removed(h), _) => runs.push(KvEventRun::Removed(vec![h.to_hex()])),
                (KvEvent::AllCleared, _) => runs.push(KvEventRun::AllCleared),
            }
        }
        KvEventEntry { events: runs }
    }

    /// The events again, in order (hashes that are not 64 hex digits are skipped).
    pub fn decode(&self) -> Vec<KvEvent> {
        let hashes = |run: &[String], f: fn(BlockHash) -> KvEvent| {
            run.iter()
                .filter_map(|h| BlockHash::from_hex(h))
                .map(f)
                .collect::<Vec<_>>()
        };
        self.events
            .iter()
            .flat_map(|run| match run {
                KvEventRun::Stored(run) => hashes(run, KvEvent::Stored),
                KvEventRun::Removed(run) => hashes(run, KvEvent::Removed),
                KvEventRun::AllCleared => vec![KvEvent::AllCleared],
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(x: u32) -> BlockHash {
        BlockHash::new(None, &[x], None, None)
    }

    #[test]
    fn events_round_trip_grouped_in_order() {
        let events = vec![
            KvEvent::AllCleared,
            KvEvent::Stored(h(1)),
            KvEvent::Stored(h(2)),
            KvEvent::Removed(h(1)),
            KvEvent::Stored(h(3)),
        ];
        let entry = KvEventEntry::encode(&events);
        assert_eq!(entry.events.len(), 4);
        let json = serde_json::to_string(&entry).unwrap();
        assert!(
            json.starts_with(r#"{"events":["all_cleared",{"stored":[""#),
            "{json}"
        );
        let back: KvEventEntry = serde_json::from_str(&json).unwrap();
        assert_eq!(back.decode(), events);
    }
}
