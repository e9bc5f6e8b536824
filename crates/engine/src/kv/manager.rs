//! [`KvCacheManager`]: per-request block tables on top of the [`BlockPool`], with automatic
//! prefix caching.
//!
//! Life of a request's blocks:
//! 1. [`KvCacheManager::get_computed_blocks`] finds the longest run of cached full blocks that
//!    match the request's prefix (a pure lookup; it never covers the whole sequence, because the
//!    last token must run through the model to produce logits).
//! 2. [`KvCacheManager::allocate_slots`] takes references on those hits and allocates new
//!    blocks so the table covers `num_computed + hits + num_new` tokens — or changes nothing and
//!    returns `None` when too few blocks are free.
//! 3. After a step ran, [`KvCacheManager::cache_computed_blocks`] registers the blocks that became
//!    full *and computed*, so later requests only ever hit K/V that was really written.
//! 4. On a model whose every layer has a sliding window, after each step
//!    [`KvCacheManager::free_outside_window`] drops the references on the leading blocks that
//!    no later query can see (after step 3 registered them, so a released full block stays
//!    findable in the prefix cache until it is evicted) and leaves [`NO_BLOCK`] holes in their
//!    table entries.
//! 5. [`KvCacheManager::free`] drops the request's references, tail block first, so under
//!    eviction a shared prefix outlives the private suffixes that follow it.
//!
//! Every reference is dropped exactly once: a hole is never freed again, and a shared block
//! that leaves one request's window only loses that request's reference.

use super::block_hash::extend_block_hashes;
use super::{AttentionWindow, BlockHash, BlockId, BlockPool, KvError, KvLeak, NO_BLOCK};
use crate::request::Request;

/// KV-cache geometry and policy. The model side converts its memory budget into `num_blocks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Blocks in the pool.
    pub num_blocks: usize,
    /// Token slots per block.
    pub block_size: usize,
    /// Reuse full blocks across requests with equal prefixes.
    pub enable_prefix_caching: bool,
    /// The attention window that bounds every layer of the model (`None` if any layer attends
    /// to the whole context): blocks outside it are released while a request runs.
    pub attention_window: Option<usize>,
}

impl KvCacheConfig {
    /// `num_blocks` blocks of 16 tokens with prefix caching on.
    pub fn new(num_blocks: usize) -> Self {
        KvCacheConfig {
            num_blocks,
            block_size: 16,
            enable_prefix_caching: true,
            attention_window: None,
        }
    }
}

/// Prefix-cache hits found for a request: blocks to share and how many tokens they hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComputedBlocks {
    /// Cached blocks covering the start of the request, in order.
    pub blocks: Vec<BlockId>,
    /// Tokens they hold (`blocks.len() * block_size`).
    pub num_tokens: usize,
}

/// Prefix-cache counters, in tokens, counted once per admission of a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Tokens of admitted requests that were looked up.
    pub queries: u64,
    /// Of those, tokens found in the cache.
    pub hits: u64,
}

impl PrefixCacheStats {
    /// `hits / queries`, or 0 before any query.
    pub fn hit_rate(&self) -> f64 {
        if self.queries == 0 {
            0.0
        } else {
            self.hits as f64 / self.queries as f64
        }
    }
}

/// Owns the block pool; each request's block table lives in its [`Request`] entry and is only
/// changed here.
#[derive(Debug, Clone)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: usize,
    enable_caching: bool,
    /// Requests holding at least one block.
    num_tables: usize,
    stats: PrefixCacheStats,
    window: Option<AttentionWindow>,
    /// Blocks released out of the attention window since start.
    window_blocks_freed: u64,
    /// Blocks registered in the prefix cache since the last [`Self::take_new_blocks`], kept
    /// only when a lower tier wants them ([`Self::log_new_blocks`]).
    new_blocks: Option<Vec<(BlockHash, BlockId)>>,
}

impl KvCacheManager {
    /// A manager over a fresh pool.
    pub fn new(config: KvCacheConfig) -> Result<Self, KvError> {
        if config.block_size == 0 {
            return Err(KvError::ZeroBlockSize);
        }
        if config.attention_window == Some(0) {
            return Err(KvError::ZeroWindow);
        }
        Ok(KvCacheManager {
            pool: BlockPool::new(config.num_blocks)?,
            block_size: config.block_size,
            enable_caching: config.enable_prefix_caching,
            num_tables: 0,
            stats: PrefixCacheStats::default(),
            window: config
                .attention_window
                .and_then(|w| AttentionWindow::new(w, config.block_size)),
            window_blocks_freed: 0,
            new_blocks: None,
        })
    }

    /// Keeps a log of the blocks registered in the prefix cache from now on, for a lower tier
    /// that keeps copies of them ([`Self::take_new_blocks`]).
    pub fn log_new_blocks(&mut self) {
        self.new_blocks.get_or_insert_with(Vec::new);
    }

    /// The blocks registered in the prefix cache since the last call (full and computed, so
    /// their K/V is written), in registration order.
    pub fn take_new_blocks(&mut self) -> Vec<(BlockHash, BlockId)> {
        self.new_blocks
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Keeps a log of the prefix cache's changes from now on ([`Self::take_kv_events`]).
    pub fn log_kv_events(&mut self) {
        self.pool.log_events();
    }

    /// Stops logging the prefix cache's changes.
    pub fn stop_kv_events(&mut self) {
        self.pool.stop_events();
    }

    /// The prefix cache's changes since the last call, in order.
    pub fn take_kv_events(&mut self) -> Vec<super::KvEvent> {
        self.pool.take_events()
    }

    /// Whether the prefix cache holds block `hash` (computed, not evicted).
    pub fn is_cached(&self, hash: &BlockHash) -> bool {
        self.pool.lookup(*hash).is_some()
    }

    /// Every hash the prefix cache holds (a snapshot for a new reader of its events).
    pub fn cached_hashes(&self) -> Vec<BlockHash> {
        self.pool.cached_hashes()
    }

    /// The hashes of `req`'s full prompt blocks past its prefix-cache hit, up to the block
    /// before its last token (the blocks a lower tier could supply), in order. Empty when
    /// caching is off, the request already holds blocks, or its blocks are not kept below
    /// RAM (see [`shareable_below`]).
    pub fn blocks_past_hit(&mut self, req: &mut Request) -> Vec<BlockHash> {
        let hit = self.get_computed_blocks(req).blocks.len();
        let empty = !self.enable_caching || !req.block_table().is_empty() || req.num_tokens() == 0;
        if empty || !shareable_below(req) {
            return Vec::new();
        }
        let max_blocks = (req.num_tokens() - 1) / self.block_size;
        req.block_hashes()
            .get(hit..max_blocks)
            .map(<[BlockHash]>::to_vec)
            .unwrap_or_default()
    }

    /// Makes the free cached blocks of `hashes` the most recently freed (last to be evicted),
    /// in order.
    pub fn refresh_cached(&mut self, hashes: &[BlockHash]) {
        for &h in hashes {
            if let Some(block) = self.pool.lookup(h) {
                self.pool.refresh(block);
            }
        }
    }

    /// Puts a block read back from a lower tier into the prefix cache as `hash`: takes the
    /// least recently freed block, lets `write` fill it, and leaves it free and cached (the
    /// most recently freed). False, with the cache unchanged, when `hash` is cached already,
    /// caching is off, no block is free, or `write` fails.
    pub fn adopt_block(&mut self, hash: BlockHash, write: impl FnOnce(BlockId) -> bool) -> bool {
        if !self.enable_caching || self.pool.lookup(hash).is_some() {
            return false;
        }
        let Some(block) = self.pool.allocate(1).and_then(|b| b.first().copied()) else {
            return false;
        };
        let written = write(block);
        if written {
            self.pool.cache_block(block, hash);
        }
        self.pool.free([block]);
        written
    }

    /// Token slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.pool.num_blocks()
    }

    /// Blocks with no user.
    pub fn num_free_blocks(&self) -> usize {
        self.pool.num_free_blocks()
    }

    /// Fraction of blocks in use.
    pub fn usage(&self) -> f64 {
        self.pool.usage()
    }

    /// Occupied blocks and the slots in them no sequence reads; `tail_slots` is the sum over
    /// running sequences of their held slots past their computed tokens.
    pub fn fragmentation(&self, tail_slots: usize) -> super::KvFragmentation {
        super::KvFragmentation {
            tail_slots,
            held_blocks: self.pool.num_blocks() - self.pool.num_free_blocks(),
            cached_only_blocks: self.pool.num_cached_free_blocks(),
            block_size: self.block_size,
        }
    }

    /// Prefix-cache counters.
    pub fn stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// The attention window whose outside is released, if the model has one on every layer.
    pub fn attention_window(&self) -> Option<AttentionWindow> {
        self.window
    }

    /// Blocks released out of the attention window since start.
    pub fn window_blocks_freed(&self) -> u64 {
        self.window_blocks_freed
    }

    /// Whether prefix caching is on.
    pub fn prefix_caching_enabled(&self) -> bool {
        self.enable_caching
    }

    /// The underlying pool (reference counts, free order), for inspection.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Blocks needed to hold `num_tokens` tokens.
    pub fn blocks_for(&self, num_tokens: usize) -> usize {
        num_tokens.div_ceil(self.block_size)
    }

    /// Number of requests holding blocks.
    pub fn num_tables(&self) -> usize {
        self.num_tables
    }

    /// The longest cached prefix of `req` in whole blocks, leaving at least its last token
    /// uncomputed. Empty when caching is off or the request already holds blocks.
    pub fn get_computed_blocks(&mut self, req: &mut Request) -> ComputedBlocks {
        if !self.enable_caching || !req.block_table().is_empty() || req.num_tokens() == 0 {
            return ComputedBlocks::default();
        }
        self.update_hashes(req);
        let max_blocks = (req.num_tokens() - 1) / self.block_size;
        let blocks: Vec<BlockId> = req
            .block_hashes()
            .iter()
            .take(max_blocks)
            .map_while(|&h| self.pool.lookup(h))
            .collect();
        let num_tokens = blocks.len() * self.block_size;
        ComputedBlocks { blocks, num_tokens }
    }

    /// Grows `req`'s table to cover `num_computed_tokens + computed.num_tokens + num_new_tokens`
    /// tokens, sharing `computed` (from [`Self::get_computed_blocks`], only on the first
    /// allocation). Hits that already lie outside the attention window of the first new token
    /// are not taken: their entries start out as [`NO_BLOCK`] holes. Returns the newly allocated
    /// blocks, or `None` with nothing changed if the pool lacks free blocks.
    pub fn allocate_slots(
        &mut self,
        req: &mut Request,
        num_new_tokens: usize,
        computed: &ComputedBlocks,
    ) -> Option<Vec<BlockId>> {
        let total = req.num_computed_tokens() + computed.num_tokens + num_new_tokens;
        let held = req.block_table().len();
        let needed = self
            .blocks_for(total)
            .saturating_sub(held + computed.blocks.len());
        let dead = self
            .window
            .map_or(0, |w| w.first_live_block(computed.num_tokens))
            .min(computed.blocks.len());
        let hits = &computed.blocks[dead..];
        // Free cached hits leave the free list when touched, so they cannot also be allocated.
        let revived = hits
            .iter()
            .filter(|&&b| self.pool.ref_count(b) == 0)
            .count();
        if needed + revived > self.pool.num_free_blocks() {
            return None;
        }
        let first_allocation = held == 0;
        if first_allocation && self.enable_caching {
            self.stats.queries += req.num_tokens() as u64;
            self.stats.hits += computed.num_tokens as u64;
        }
        self.pool.touch(hits);
        // The capacity check above guarantees `needed` free blocks remain after the touch.
        let new_blocks = self.pool.allocate(needed)?;
        let table = req.blocks_mut();
        if table.table.is_empty() {
            table.num_cached = computed.blocks.len();
            table.num_released = dead;
        }
        table.table.resize(table.table.len() + dead, NO_BLOCK);
        table.table.extend_from_slice(hits);
        table.table.extend_from_slice(&new_blocks);
        if first_allocation && !table.table.is_empty() {
            self.num_tables += 1;
        }
        Some(new_blocks)
    }

    /// Registers in the prefix cache every full block of `req` whose tokens are all computed.
    pub fn cache_computed_blocks(&mut self, req: &mut Request) {
        if !self.enable_caching {
            return;
        }
        let num_cached = req.blocks().num_cached;
        let num_full = req.num_computed_tokens() / self.block_size;
        if req.block_table().is_empty() || num_full <= num_cached {
            return;
        }
        self.update_hashes(req);
        let lower_tier = shareable_below(req);
        let num_full = num_full.min(req.block_table().len());
        for i in num_cached..num_full {
            let block = req.block_table()[i];
            // Blocks are released only after they were registered here.
            debug_assert_ne!(block, NO_BLOCK, "block {i} released before it was cached");
            let hash = req.block_hashes()[i];
            if block != NO_BLOCK && self.pool.cache_block(block, hash) && lower_tier {
                if let Some(log) = &mut self.new_blocks {
                    log.push((hash, block));
                }
            }
        }
        req.blocks_mut().num_cached = num_full.max(num_cached);
    }

    /// Releases the leading blocks of running `req` that no query at its next position
    /// (`num_computed_tokens`) or later can see, when the model has a window on every layer.
    /// A shared block only loses this request's reference; a full block stays in the prefix
    /// cache. Returns how many blocks were released.
    pub fn free_outside_window(&mut self, req: &mut Request) -> usize {
        let Some(window) = self.window else {
            return 0;
        };
        let first_live = window.first_live_block(req.num_computed_tokens());
        let blocks = req.blocks_mut();
        let end = first_live.min(blocks.table.len());
        if end <= blocks.num_released {
            return 0;
        }
        let released = &mut blocks.table[blocks.num_released..end];
        debug_assert!(
            released.iter().all(|&b| b != NO_BLOCK),
            "a released block is released again"
        );
        self.pool.free(released.iter().copied());
        released.fill(NO_BLOCK);
        let n = end - blocks.num_released;
        blocks.num_released = end;
        self.window_blocks_freed += n as u64;
        n
    }

    /// Lends fresh blocks for `num_tokens` tokens to `f` (work outside any request, such as an
    /// embedding pass) and frees them when it returns, so nothing can leak; `None`, with
    /// nothing changed, when too few blocks are free.
    pub fn with_scratch_blocks<T>(
        &mut self,
        num_tokens: usize,
        f: impl FnOnce(&[BlockId]) -> T,
    ) -> Option<T> {
        let blocks = self.pool.allocate(self.blocks_for(num_tokens))?;
        let out = f(&blocks);
        self.pool.free(blocks.iter().rev().copied());
        Some(out)
    }

    /// Releases the blocks at the end of `req`'s table that hold none of its tokens (draft-token
    /// slots left over after a verification step rejected drafts). Returns how many.
    pub fn free_tail(&mut self, req: &mut Request) -> usize {
        let keep = self.blocks_for(req.num_tokens());
        let blocks = req.blocks_mut();
        let keep = keep.max(blocks.num_released).max(blocks.num_cached);
        if blocks.table.len() <= keep {
            return 0;
        }
        let tail = blocks.table.split_off(keep);
        debug_assert!(tail.iter().all(|&b| b != NO_BLOCK), "a hole in the tail");
        self.pool.free(tail.iter().rev().copied());
        tail.len()
    }

    /// Releases all of `req`'s blocks, last block first (so its tail is evicted first); holes
    /// left by [`Self::free_outside_window`] were released already.
    pub fn free(&mut self, req: &mut Request) {
        let blocks = req.take_blocks();
        if !blocks.table.is_empty() {
            self.num_tables -= 1;
            let held = &blocks.table[blocks.num_released..];
            debug_assert!(
                held.iter().all(|&b| b != NO_BLOCK),
                "a hole past the released prefix"
            );
            self.pool.free(held.iter().rev().copied());
        }
    }

    /// Checks, while no request is alive, that every block is free, that no block table is
    /// counted, and that the pool's invariants hold (O(number of blocks)).
    pub fn check_idle(&self) -> Result<(), KvLeak> {
        self.pool.check_invariants().map_err(KvLeak::Invariant)?;
        let total = self.pool.num_blocks();
        let free = self.pool.num_free_blocks();
        if free != total {
            return Err(KvLeak::BlocksHeld {
                held: total - free,
                total,
            });
        }
        if self.num_tables != 0 {
            return Err(KvLeak::TablesHeld(self.num_tables));
        }
        Ok(())
    }

    /// Forgets all cached prefixes; only possible while no request holds blocks.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.pool.reset_prefix_cache()
    }

    fn update_hashes(&self, req: &mut Request) {
        let key = req.params().prefix_key();
        let salt = req.params().cache_salt.clone();
        let (tokens, hashes) = req.block_hashes_mut();
        extend_block_hashes(hashes, tokens, self.block_size, key, salt.as_deref());
    }
}

/// Whether `req`'s blocks may go to (and come from) a tier that outlives the process: not
/// those of a LoRA adapter, whose cache namespace is its id in this process only (a restart
/// may give the id to another adapter).
fn shareable_below(req: &Request) -> bool {
    req.params().adapter.is_none()
}
