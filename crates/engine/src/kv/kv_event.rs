//! [`KvEvent`]: a change to the prefix cache, as a router outside the engine needs to see it
//! (vLLM's KV events `BlockStored`, `BlockRemoved`, `AllBlocksCleared`).
//!
//! The block pool logs them once asked to ([`super::BlockPool::log_events`]); the engine thread
//! hands them on in small batches through a bounded channel, never waiting for the reader
//! (see `core::kv_event_link`). A batch that begins with [`KvEvent::AllCleared`] followed by
//! `Stored` events is a snapshot: the cache holds exactly those blocks.

use super::BlockHash;

/// One change to the set of blocks the prefix cache can hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvEvent {
    /// A full, computed block was registered under this hash.
    Stored(BlockHash),
    /// The block of this hash was evicted (its memory now holds something else).
    Removed(BlockHash),
    /// Every cached block was forgotten.
    AllCleared,
}

/// The events that describe a cache holding exactly `hashes`.
pub fn snapshot(hashes: impl IntoIterator<Item = BlockHash>) -> Vec<KvEvent> {
    std::iter::once(KvEvent::AllCleared)
        .chain(hashes.into_iter().map(KvEvent::Stored))
        .collect()
}
