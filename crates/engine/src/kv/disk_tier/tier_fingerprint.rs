//! [`TierFingerprint`]: what a disk tier's blocks are only valid for — the model, its weights'
//! type, the KV dtype and the block geometry — so one model never reads another's KV.

use sha2::{Digest, Sha256};

/// A digest of everything a block's bytes depend on besides its tokens (which its hash names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TierFingerprint([u8; 32]);

impl TierFingerprint {
    /// The fingerprint of `description`: a text naming the model (its identity and weights'
    /// type), the KV dtype and the KV geometry. Equal descriptions share blocks.
    pub fn of(description: &str) -> Self {
        let mut h = Sha256::new();
        h.update(b"kestrel-kv-tier-v1\0");
        h.update(description.as_bytes());
        TierFingerprint(h.finalize().into())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first 16 hex digits: the name of this fingerprint's directory in the tier.
    pub fn short_hex(&self) -> String {
        self.0[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}
