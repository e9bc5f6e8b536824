//! [`KvFragmentation`]: how much of the KV cache's occupied space holds nothing that a running
//! sequence reads.
//!
//! Two kinds of slot count as fragmented:
//!
//! * **tail slots**: slots of blocks a running sequence holds past its last computed token
//!   (its partly-filled last block, and blocks reserved ahead of the tokens that will fill
//!   them);
//! * **cached-only blocks**: blocks no sequence holds any more that stay in the prefix cache
//!   (a finished request's history, kept for the next turn; evictable on demand).
//!
//! ```text
//! fraction = (tail slots + cached-only blocks x block_size)
//!            / ((held blocks + cached-only blocks) x block_size)
//! ```
//!
//! Held blocks count once however many sequences share them; a shared block is full, so it has
//! no tail slots. An empty cache reads 0.

/// The parts of the KV fragmentation fraction, in slots and blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvFragmentation {
    /// Slots reserved by running sequences past their computed tokens.
    pub tail_slots: usize,
    /// Blocks held by at least one sequence.
    pub held_blocks: usize,
    /// Blocks only the prefix cache keeps.
    pub cached_only_blocks: usize,
    /// Token slots per block.
    pub block_size: usize,
}

impl KvFragmentation {
    /// Fragmented slots over occupied slots, in `[0, 1]`.
    pub fn fraction(&self) -> f64 {
        let occupied = (self.held_blocks + self.cached_only_blocks) * self.block_size;
        if occupied == 0 {
            return 0.0;
        }
        let wasted = self.tail_slots + self.cached_only_blocks * self.block_size;
        (wasted.min(occupied)) as f64 / occupied as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_cache_is_not_fragmented() {
        let f = KvFragmentation {
            block_size: 16,
            ..Default::default()
        };
        assert_eq!(f.fraction(), 0.0);
    }

    #[test]
    fn tail_slots_and_cached_only_blocks_count_against_occupied_slots() {
        // 3 held blocks (48 slots) with 10 unused at the tail, plus 1 cached-only block.
        let f = KvFragmentation {
            tail_slots: 10,
            held_blocks: 3,
            cached_only_blocks: 1,
            block_size: 16,
        };
        assert!((f.fraction() - 26.0 / 64.0).abs() < 1e-12);
    }
}
