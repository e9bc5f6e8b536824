//! [`BlockPool`]: reference counts, the LRU free list and the prefix-cache map.
//!
//! The free list is an intrusive doubly linked list threaded through the per-block metadata
//! (`prev`/`next` are block ids), so every operation is O(1), including taking a block out of
//! the *middle* of the list when a prefix-cache hit revives a cached block whose last user has
//! gone.
//!
//! ```text
//!  head (evicted first)                                   tail (evicted last)
//!   [ 5 ] <-> [ 6 ] <-> [ 2 (cached h) ] <-> [ 1 (cached g) ]
//!                          ^ a hit on h unlinks block 2 in O(1)
//! ```
//!
//! A freed block that holds a full, hashed block keeps its hash and stays findable in the
//! cache map until it is allocated for something else (eviction). Blocks are handed out from the
//! head, and freed blocks are appended to the tail, so eviction order is least recently freed
//! first.

use std::collections::HashMap;

use super::{BlockHash, BlockId, KvError, KvEvent};

/// Terminator of the intrusive list.
const NIL: BlockId = BlockId::MAX;

#[derive(Debug, Clone)]
struct BlockMeta {
    ref_cnt: u32,
    hash: Option<BlockHash>,
    in_free_list: bool,
    prev: BlockId,
    next: BlockId,
}

/// Every KV block's reference count, the free list and the prefix-cache map.
#[derive(Debug, Clone)]
pub struct BlockPool {
    meta: Vec<BlockMeta>,
    head: BlockId,
    tail: BlockId,
    num_free: usize,
    cache: HashMap<BlockHash, BlockId>,
    /// Changes to `cache` since the last [`Self::take_events`], kept only once
    /// [`Self::log_events`] asked for them.
    events: Option<Vec<KvEvent>>,
}

impl BlockPool {
    /// A pool of `num_blocks` free blocks; the initial free order is `0, 1, .., num_blocks - 1`.
    pub fn new(num_blocks: usize) -> Result<Self, KvError> {
        if num_blocks == 0 {
            return Err(KvError::NoBlocks);
        }
        if num_blocks >= NIL as usize {
            return Err(KvError::TooManyBlocks(num_blocks));
        }
        let meta = (0..num_blocks)
            .map(|_| BlockMeta {
                ref_cnt: 0,
                hash: None,
                in_free_list: false,
                prev: NIL,
                next: NIL,
            })
            .collect();
        let mut pool = BlockPool {
            meta,
            head: NIL,
            tail: NIL,
            num_free: 0,
            cache: HashMap::new(),
            events: None,
        };
        for id in 0..num_blocks {
            // `num_blocks < u32::MAX` was checked above, so the id fits.
            pool.push_back(id as BlockId);
        }
        Ok(pool)
    }

    /// Total number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.meta.len()
    }

    /// Blocks with no user (including cached ones that can still be evicted).
    pub fn num_free_blocks(&self) -> usize {
        self.num_free
    }

    /// Fraction of blocks in use, in `[0, 1]` (free cached blocks count as unused).
    pub fn usage(&self) -> f64 {
        1.0 - self.num_free as f64 / self.meta.len() as f64
    }

    /// Reference count of `block`.
    pub fn ref_count(&self, block: BlockId) -> u32 {
        self.meta[block as usize].ref_cnt
    }

    /// Hash of `block` while it is registered in the prefix cache.
    pub fn block_hash(&self, block: BlockId) -> Option<BlockHash> {
        self.meta[block as usize].hash
    }

    /// Number of blocks registered in the prefix cache (in use or free).
    pub fn num_cached_blocks(&self) -> usize {
        self.cache.len()
    }

    /// Blocks no user holds that the prefix cache still keeps (evictable on demand).
    pub fn num_cached_free_blocks(&self) -> usize {
        self.cache
            .values()
            .filter(|&&b| self.meta[b as usize].ref_cnt == 0)
            .count()
    }

    /// The cached block holding `hash`, if it has not been evicted.
    pub fn lookup(&self, hash: BlockHash) -> Option<BlockId> {
        self.cache.get(&hash).copied()
    }

    /// Keeps a log of the changes to the prefix-cache map from now on ([`Self::take_events`]).
    pub fn log_events(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// Stops logging (and drops the changes not taken).
    pub fn stop_events(&mut self) {
        self.events = None;
    }

    /// The changes to the prefix-cache map since the last call, in order.
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Every hash the prefix cache holds, in no particular order.
    pub fn cached_hashes(&self) -> Vec<BlockHash> {
        self.cache.keys().copied().collect()
    }

    fn record(&mut self, event: KvEvent) {
        if let Some(log) = &mut self.events {
            log.push(event);
        }
    }

    /// The free list from the next block to evict to the last, for inspection and tests.
    pub fn free_list(&self) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.num_free);
        let mut cur = self.head;
        while cur != NIL {
            out.push(cur);
            cur = self.meta[cur as usize].next;
        }
        out
    }

    /// Takes one more reference on each of `blocks` (prefix-cache hits), reviving free ones.
    pub fn touch(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            if self.meta[b as usize].in_free_list {
                self.unlink(b);
            }
            self.meta[b as usize].ref_cnt += 1;
        }
    }

    /// Takes `n` blocks from the head of the free list (evicting their cached contents), each
    /// with a reference count of 1; `None`, with nothing changed, when fewer than `n` are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.num_free {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let b = self.head;
            self.unlink(b);
            self.evict(b);
            self.meta[b as usize].ref_cnt = 1;
            out.push(b);
        }
        Some(out)
    }

    /// Drops one reference on each block, in order; a block whose count reaches zero goes to the
    /// tail of the free list (keeping its cached hash).
    pub fn free(&mut self, blocks: impl IntoIterator<Item = BlockId>) {
        for b in blocks {
            let m = &mut self.meta[b as usize];
            debug_assert!(m.ref_cnt > 0, "block {b} freed more often than referenced");
            m.ref_cnt = m.ref_cnt.saturating_sub(1);
            if m.ref_cnt == 0 && !m.in_free_list {
                self.push_back(b);
            }
        }
    }

    /// Moves free block `block` to the tail of the free list (evicted last); a block in use
    /// is left alone.
    pub fn refresh(&mut self, block: BlockId) {
        if self.meta[block as usize].in_free_list {
            self.unlink(block);
            self.push_back(block);
        }
    }

    /// Registers the full block `block` under `hash`. Returns false (and leaves the block
    /// uncached) if it already has a hash or another block already holds the same content.
    pub fn cache_block(&mut self, block: BlockId, hash: BlockHash) -> bool {
        if self.meta[block as usize].hash.is_some() || self.cache.contains_key(&hash) {
            return false;
        }
        self.meta[block as usize].hash = Some(hash);
        self.cache.insert(hash, block);
        self.record(KvEvent::Stored(hash));
        true
    }

    /// Forgets every cached hash; only possible while no block is in use.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.num_free != self.meta.len() {
            return false;
        }
        self.cache.clear();
        self.meta.iter_mut().for_each(|m| m.hash = None);
        self.record(KvEvent::AllCleared);
        true
    }

    /// Checks the pool's internal invariants, describing the first violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let list = self.free_list();
        if list.len() != self.num_free {
            return Err(format!(
                "free list has {} blocks, counter {}",
                list.len(),
                self.num_free
            ));
        }
        for (id, m) in self.meta.iter().enumerate() {
            if m.in_free_list != (m.ref_cnt == 0) {
                return Err(format!(
                    "block {id}: ref {} but in_free_list {}",
                    m.ref_cnt, m.in_free_list
                ));
            }
            if let Some(h) = m.hash {
                if self.cache.get(&h) != Some(&(id as BlockId)) {
                    return Err(format!(
                        "block {id} has a hash the cache map does not point back to"
                    ));
                }
            }
        }
        for (h, &b) in &self.cache {
            if self.meta[b as usize].hash != Some(*h) {
                return Err(format!("cache entry for block {b} does not match its hash"));
            }
        }
        Ok(())
    }

    fn evict(&mut self, b: BlockId) {
        if let Some(h) = self.meta[b as usize].hash.take() {
            self.cache.remove(&h);
            self.record(KvEvent::Removed(h));
        }
    }

    fn push_back(&mut self, b: BlockId) {
        let old_tail = self.tail;
        {
            let m = &mut self.meta[b as usize];
            m.prev = old_tail;
            m.next = NIL;
            m.in_free_list = true;
        }
        if old_tail == NIL {
            self.head = b;
        } else {
            self.meta[old_tail as usize].next = b;
        }
        self.tail = b;
        self.num_free += 1;
    }

    fn unlink(&mut self, b: BlockId) {
        let (prev, next) = {
            let m = &mut self.meta[b as usize];
            let links = (m.prev, m.next);
            m.prev = NIL;
            m.next = NIL;
            m.in_free_list = false;
            links
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.meta[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.meta[next as usize].prev = prev;
        }
        self.num_free -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(x: u32) -> BlockHash {
        BlockHash::new(None, &[x], None, None)
    }

    #[test]
    fn logged_events_follow_the_cache_map() {
        let mut pool = BlockPool::new(2).unwrap();
        pool.cache_block(0, h(9));
        assert!(
            pool.take_events().is_empty(),
            "nothing is logged before asked"
        );
        pool.log_events();
        let blocks = pool.allocate(2).unwrap();
        assert_eq!(pool.take_events(), vec![KvEvent::Removed(h(9))]);
        assert!(pool.cache_block(blocks[0], h(1)));
        assert!(
            !pool.cache_block(blocks[1], h(1)),
            "a duplicate is not stored"
        );
        assert!(pool.cache_block(blocks[1], h(2)));
        assert_eq!(
            pool.take_events(),
            vec![KvEvent::Stored(h(1)), KvEvent::Stored(h(2))]
        );
        assert!(pool.take_events().is_empty());
        pool.free(blocks.iter().rev().copied());
        let mut cached = pool.cached_hashes();
        cached.sort();
        let mut want = vec![h(1), h(2)];
        want.sort();
        assert_eq!(cached, want);
        assert!(pool.reset_prefix_cache());
        assert_eq!(pool.take_events(), vec![KvEvent::AllCleared]);
    }

    #[test]
    fn allocate_free_touch_keep_lru_order() {
        let mut pool = BlockPool::new(4).unwrap();
        assert_eq!(pool.allocate(2), Some(vec![0, 1]));
        assert_eq!(pool.free_list(), vec![2, 3]);
        assert!(pool.cache_block(0, h(0)));
        assert!(
            !pool.cache_block(1, h(0)),
            "duplicate content must not be registered twice"
        );
        pool.free([1, 0]);
        assert_eq!(pool.free_list(), vec![2, 3, 1, 0]);
        assert_eq!(pool.lookup(h(0)), Some(0));
        pool.touch(&[0]);
        assert_eq!(pool.ref_count(0), 1);
        assert_eq!(pool.free_list(), vec![2, 3, 1]);
        assert_eq!(pool.allocate(4), None);
        assert_eq!(pool.allocate(3), Some(vec![2, 3, 1]));
        pool.free([0]);
        assert_eq!(pool.allocate(1), Some(vec![0]));
        assert_eq!(
            pool.lookup(h(0)),
            None,
            "allocating a cached free block evicts it"
        );
        pool.check_invariants().unwrap();
    }

    #[test]
    fn unlink_from_middle_head_and_tail() {
        let mut pool = BlockPool::new(5).unwrap();
        pool.touch(&[2]);
        pool.touch(&[0]);
        pool.touch(&[4]);
        assert_eq!(pool.free_list(), vec![1, 3]);
        pool.free([4, 0, 2]);
        assert_eq!(pool.free_list(), vec![1, 3, 4, 0, 2]);
        assert_eq!(pool.num_free_blocks(), 5);
        pool.check_invariants().unwrap();
    }

    #[test]
    fn rejects_empty_pool() {
        assert_eq!(BlockPool::new(0).unwrap_err(), KvError::NoBlocks);
    }
}
