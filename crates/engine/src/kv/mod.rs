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
//!   (`get_computed_blocks`), allocation for new tokens (`allocate_slots`) and `free`.
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

pub mod block_hash;
pub mod block_pool;
pub mod manager;

pub use block_hash::BlockHash;
pub use block_pool::BlockPool;
pub use manager::{ComputedBlocks, KvCacheConfig, KvCacheManager, PrefixCacheStats};

/// Physical KV block id (an index into the model's KV buffer).
pub type BlockId = u32;

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
}
