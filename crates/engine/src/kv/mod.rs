//! Paged KV-cache bookkeeping (no tensors: only block ids, reference counts and hashes).
//!
//! The model side owns one big KV buffer cut into `num_blocks` blocks of `block_size` token
//! slots; this module decides which physical block holds which tokens of which request.
//!
//! * [`block_hash`] — [`BlockHash`], the chained hash that names a *full* block by its content
//!   and everything before it, so equal prefixes map to equal hashes.
//! * [`block_pool`] — [`BlockPool`]: reference counts, the O(1) LRU free list and the
//!   prefix-cache map `hash -> block`.
//! * [`manager`] — [`KvCacheManager`]: per-request block tables, prefix-cache lookups
//!   (`get_computed_blocks`), allocation for new tokens (`allocate_slots`), `free`, and the
//!   release of blocks that fell out of a sliding window (`free_outside_window`).
//! * [`kv_event`] — [`KvEvent`]: blocks stored in and removed from the prefix cache, for a
//!   router that sends a conversation back to the engine holding its prefix.
//! * [`kv_fragmentation`] — [`KvFragmentation`]: the share of occupied KV slots that no
//!   running sequence reads (partly-filled tails, blocks only the prefix cache keeps).
//! * [`attention_window`] — [`AttentionWindow`]: which blocks a sliding-window sequence still
//!   needs, and how many it can hold at most.
//!
//! A request's block table maps logical token positions to physical slots:
//!
//! ```text
//! position p  ->  block_table[p / block_size], slot p % block_size
//!
//! tokens:      | t0 .. t15 | t16 .. t31 | t32 .. t39 ...... |
//! block_table: |    7      |     2      |    11 (partial)   |
//! hashes:      |   h0      | h1=H(h0,.) |   (none: not full)|
//! ```
//!
//! On a model whose every layer has a sliding window, blocks no future query can see are
//! released while the request runs. Their entries stay in the table as [`NO_BLOCK`] holes, so
//! `p / block_size` still indexes the right entry for every live position:
//!
//! ```text
//! block_table: | NO_BLOCK  | NO_BLOCK   |  5  |  11 (partial) |
//! ```

pub mod attention_window;
pub mod block_hash;
pub mod block_pool;
pub mod disk_tier;
pub mod kv_event;
pub mod kv_fragmentation;
pub mod manager;

pub use attention_window::AttentionWindow;
pub use block_hash::BlockHash;
pub use block_pool::BlockPool;
pub use kv_event::KvEvent;
pub use kv_fragmentation::KvFragmentation;
pub use manager::{ComputedBlocks, KvCacheConfig, KvCacheManager, PrefixCacheStats};

/// Physical KV block id (an index into the model's KV buffer).
pub type BlockId = u32;

/// A block-table entry whose block was released because it fell out of the attention window
/// of every layer. No block has this id (`u32::MAX` is reserved), and no query reads or writes
/// a position it covers.
pub const NO_BLOCK: BlockId = BlockId::MAX;

/// Invalid KV-cache configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// The pool must hold at least one block.
    #[error("the KV cache needs at least one block")]
    NoBlocks,
    /// Block ids are `u32` and `u32::MAX` is reserved as the list terminator.
    #[error("{0} KV blocks exceed the supported maximum of {max}", max = u32::MAX - 1)]
    TooManyBlocks(usize),
    /// A block must hold at least one token.
    #[error("the KV block size must be at least 1")]
    ZeroBlockSize,
    /// An attention window must hold at least one token.
    #[error("the attention window must be at least 1 token")]
    ZeroWindow,
}

/// A KV-cache bookkeeping fault found by [`KvCacheManager::check_idle`]: blocks still held with
/// no request alive (a leak), or a broken block-pool invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvLeak {
    /// Blocks are referenced although no request holds a table.
    #[error("{held} of {total} KV blocks still referenced with no request alive")]
    BlocksHeld { held: usize, total: usize },
    /// Block tables are counted although no request is alive.
    #[error("{0} block tables still counted with no request alive")]
    TablesHeld(usize),
    /// The pool's free list, reference counts or cache map disagree.
    #[error("block-pool invariant broken: {0}")]
    Invariant(String),
}
