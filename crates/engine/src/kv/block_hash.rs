//! Chained content hashes of full KV blocks, the keys of the prefix cache.
//!
//! Block `i` of a sequence is named by `H(hash of block i-1, tokens of block i, extra key)`, so a
//! hash identifies the whole prefix up to and including that block: two requests share block `i`
//! only if they agree on every token before it. The extra key separates caches that must never
//! mix even for equal tokens (another model, LoRA adapter or cache salt).
//!
//! The hash is SHA-256, so a client cannot craft token sequences whose blocks collide with
//! another client's prefix (SipHash with per-process keys was not collision resistant against an
//! adaptive adversary who observes `cached_tokens`). A hit is trusted without comparing tokens.
//! The bytes hashed, in order:
//!
//! * the tag `b"kestrel-kv-block-v2\0"`;
//! * the parent: `0x00`, or `0x01` and its 32 bytes;
//! * the extra key: `0x00`, or `0x01` and the `u64` little-endian;
//! * the cache salt, first block only: `0x00`, or `0x01`, the salt's byte length as `u64` LE and
//!   its UTF-8 bytes (later blocks inherit it through the parent);
//! * the token count as `u64` LE, then each token as `u32` LE.
//!
//! A salt (a request's `cache_salt`, or one derived from its API key) therefore gives a chain of
//! its own: requests with different salts share no block, not even the first.

use sha2::{Digest, Sha256};

const TAG: &[u8] = b"kestrel-kv-block-v2\0";

/// Hash of a full block and (through its parent) of every block before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash([u8; 32]);

impl BlockHash {
    /// Hash of a block holding `tokens`, following the block hashed as `parent` (`None` for the
    /// first block), under the cache namespace `extra_key`; `salt` counts for the first block
    /// only.
    pub fn new(
        parent: Option<BlockHash>,
        tokens: &[u32],
        extra_key: Option<u64>,
        salt: Option<&str>,
    ) -> Self {
        let mut h = Sha256::new();
        h.update(TAG);
        optional(&mut h, parent.as_ref().map(|p| p.0.as_slice()));
        optional(
            &mut h,
            extra_key
                .map(u64::to_le_bytes)
                .as_ref()
                .map(|b| b.as_slice()),
        );
        if parent.is_none() {
            match salt {
                Some(s) => {
                    h.update([1u8]);
                    h.update((s.len() as u64).to_le_bytes());
                    h.update(s.as_bytes());
                }
                None => h.update([0u8]),
            }
        }
        h.update((tokens.len() as u64).to_le_bytes());
        for t in tokens {
            h.update(t.to_le_bytes());
        }
        BlockHash(h.finalize().into())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The hash whose raw bytes are `bytes` (as a store keyed by hashes reads them back).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        BlockHash(bytes)
    }

    /// The bytes as 64 lowercase hex digits (a file name).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The hash named by 64 hex digits; `None` for anything else.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(BlockHash(bytes))
    }
}

/// `0x00` for none, else `0x01` and the bytes.
fn optional(h: &mut Sha256, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            h.update([1u8]);
            h.update(b);
        }
        None => h.update([0u8]),
    }
}

/// Extends `hashes` so it names every full block of `tokens` (blocks already hashed are kept;
/// a trailing partial block gets no hash).
pub fn extend_block_hashes(
    hashes: &mut Vec<BlockHash>,
    tokens: &[u32],
    block_size: usize,
    extra_key: Option<u64>,
    salt: Option<&str>,
) {
    let num_full = tokens.len() / block_size.max(1);
    for i in hashes.len()..num_full {
        let parent = i.checked_sub(1).map(|j| hashes[j]);
        let block = &tokens[i * block_size..(i + 1) * block_size];
        hashes.push(BlockHash::new(parent, block, extra_key, salt));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN_PLAIN: &str = "b96316291dbfe63e5fa8a9e0b5e50ac91e10084e6e30476271a0d4162cb6c59c";
    const GOLDEN_SALTED: &str = "db3999f44cb0e472bcfa8574533e50aca324547b3b4465b6162bae788d7d2b4c";
    const GOLDEN_CHILD: &str = "5db501bb7718a90c80f76f4c80b3532dfc8f7573573a932f0228cd56b16994a2";

    #[test]
    fn equal_prefixes_hash_equal_and_chain_differs() {
        let a = BlockHash::new(None, &[1, 2, 3, 4], None, None);
        assert_eq!(a, BlockHash::new(None, &[1, 2, 3, 4], None, None));
        assert_ne!(a, BlockHash::new(None, &[1, 2, 3, 5], None, None));
        assert_ne!(a, BlockHash::new(None, &[1, 2, 3, 4], Some(7), None));
        let b1 = BlockHash::new(Some(a), &[9, 9, 9, 9], None, None);
        let other_parent = BlockHash::new(None, &[0, 2, 3, 4], None, None);
        assert_ne!(
            b1,
            BlockHash::new(Some(other_parent), &[9, 9, 9, 9], None, None)
        );
    }

    /// Known answers computed independently with Python's hashlib over the documented bytes
    /// (`scripts/goldens/block_hash.py`).
    #[test]
    fn hash_is_sha256_of_the_documented_bytes() {
        let hex = |h: BlockHash| {
            h.as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let a = BlockHash::new(None, &[1, 2, 3, 4], None, None);
        assert_eq!(hex(a), GOLDEN_PLAIN);
        let salted = BlockHash::new(None, &[1, 2, 3, 4], Some(7), Some("tenant-a"));
        assert_eq!(hex(salted), GOLDEN_SALTED);
        let child = BlockHash::new(Some(a), &[5, 6, 7, 8], None, Some("ignored"));
        assert_eq!(hex(child), GOLDEN_CHILD);
    }

    #[test]
    fn salt_changes_the_first_block_and_so_the_chain() {
        let plain = BlockHash::new(None, &[1, 2, 3, 4], None, None);
        let a = BlockHash::new(None, &[1, 2, 3, 4], None, Some("a"));
        let b = BlockHash::new(None, &[1, 2, 3, 4], None, Some("b"));
        assert!(plain != a && a != b && plain != b);
        assert_eq!(a, BlockHash::new(None, &[1, 2, 3, 4], None, Some("a")));
        // The empty salt is a salt too.
        assert_ne!(plain, BlockHash::new(None, &[1, 2, 3, 4], None, Some("")));
        let next = |p| BlockHash::new(Some(p), &[5, 6, 7, 8], None, None);
        assert_ne!(next(a), next(b));
    }

    #[test]
    fn extend_hashes_only_full_blocks_and_incrementally() {
        let tokens: Vec<u32> = (0..10).collect();
        let mut hashes = Vec::new();
        extend_block_hashes(&mut hashes, &tokens[..5], 4, None, None);
        assert_eq!(hashes.len(), 1);
        extend_block_hashes(&mut hashes, &tokens, 4, None, None);
        assert_eq!(hashes.len(), 2);
        let mut fresh = Vec::new();
        extend_block_hashes(&mut fresh, &tokens, 4, None, None);
        assert_eq!(hashes, fresh);
        assert_eq!(
            hashes[1],
            BlockHash::new(Some(hashes[0]), &[4, 5, 6, 7], None, None)
        );
    }
}
