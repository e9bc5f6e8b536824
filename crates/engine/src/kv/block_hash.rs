//! Chained content hashes of full KV blocks, the keys of the prefix cache.
//!
//! Block `i` of a sequence is named by `H(hash of block i-1, tokens of block i, extra key)`, so a
//! hash identifies the whole prefix up to and including that block: two requests share block `i`
//! only if they agree on every token before it. The extra key separates caches that must never
//! mix even for equal tokens (another model, LoRA adapter or cache salt).
//!
//! The hash is 128 bits wide (two independently keyed SipHash-1-3 runs from the standard
//! library), deterministic within a process, and needs no extra dependency.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Domain separators for the two 64-bit halves.
const DOMAIN_LO: u64 = 0x6b65_7374_7265_6c30;
const DOMAIN_HI: u64 = 0x6b65_7374_7265_6c31;

/// Hash of a full block and (through its parent) of every block before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(u128);

impl BlockHash {
    /// Hash of a block holding `tokens`, following the block hashed as `parent` (`None` for the
    /// first block), under the cache namespace `extra_key`.
    pub fn new(parent: Option<BlockHash>, tokens: &[u32], extra_key: Option<u64>) -> Self {
        let lo = half(DOMAIN_LO, parent, tokens, extra_key);
        let hi = half(DOMAIN_HI, parent, tokens, extra_key);
        BlockHash((u128::from(hi) << 64) | u128::from(lo))
    }

    /// The raw 128-bit value.
    pub fn as_u128(self) -> u128 {
        self.0
    }
}

fn half(domain: u64, parent: Option<BlockHash>, tokens: &[u32], extra_key: Option<u64>) -> u64 {
    let mut h = DefaultHasher::new();
    domain.hash(&mut h);
    parent.map(BlockHash::as_u128).hash(&mut h);
    extra_key.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

/// Extends `hashes` so it names every full block of `tokens` (blocks already hashed are kept;
/// a trailing partial block gets no hash).
pub fn extend_block_hashes(
    hashes: &mut Vec<BlockHash>,
    tokens: &[u32],
    block_size: usize,
    extra_key: Option<u64>,
) {
    let num_full = tokens.len() / block_size.max(1);
    for i in hashes.len()..num_full {
        let parent = i.checked_sub(1).map(|j| hashes[j]);
        let block = &tokens[i * block_size..(i + 1) * block_size];
        hashes.push(BlockHash::new(parent, block, extra_key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_prefixes_hash_equal_and_chain_differs() {
        let a = BlockHash::new(None, &[1, 2, 3, 4], None);
        assert_eq!(a, BlockHash::new(None, &[1, 2, 3, 4], None));
        assert_ne!(a, BlockHash::new(None, &[1, 2, 3, 5], None));
        assert_ne!(a, BlockHash::new(None, &[1, 2, 3, 4], Some(7)));
        let b1 = BlockHash::new(Some(a), &[9, 9, 9, 9], None);
        let other_parent = BlockHash::new(None, &[0, 2, 3, 4], None);
        assert_ne!(b1, BlockHash::new(Some(other_parent), &[9, 9, 9, 9], None));
    }

    #[test]
    fn extend_hashes_only_full_blocks_and_incrementally() {
        let tokens: Vec<u32> = (0..10).collect();
        let mut hashes = Vec::new();
        extend_block_hashes(&mut hashes, &tokens[..5], 4, None);
        assert_eq!(hashes.len(), 1);
        extend_block_hashes(&mut hashes, &tokens, 4, None);
        assert_eq!(hashes.len(), 2);
        let mut fresh = Vec::new();
        extend_block_hashes(&mut fresh, &tokens, 4, None);
        assert_eq!(hashes, fresh);
        assert_eq!(
            hashes[1],
            BlockHash::new(Some(hashes[0]), &[4, 5, 6, 7], None)
        );
    }
}
