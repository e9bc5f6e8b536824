//! Response ids and the system fingerprint.
//!
//! Ids are `<prefix>-<32 hex digits>` drawn at random (std's per-process random hash keys over
//! the clock and a counter), so they are unique across requests, restarts and replicas rather
//! than a per-process counter. The fingerprint, `fp_kestrel_<10 hex digits>`, is a stable hash
//! (FNV-1a) of the served model's id and Kestrel's version: it changes when either does, as
//! OpenAI's `system_fingerprint` changes with the backend configuration.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh response id: `prefix`, a dash and 128 random bits in hex.
pub fn response_id(prefix: &str) -> String {
    format!("{prefix}-{}", random_hex128())
}

/// 128 random bits as 32 lowercase hex digits.
pub fn random_hex128() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let half = |salt: u8| RandomState::new().hash_one((salt, count, nanos));
    format!("{:016x}{:016x}", half(0), half(1))
}

/// `fp_kestrel_` and a short stable hash of `model_id` and the crate version.
pub fn system_fingerprint(model_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in model_id
        .bytes()
        .chain([0])
        .chain(env!("CARGO_PKG_VERSION").bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fp_kestrel_{:010x}", h >> 24)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_fingerprints_stable() {
        let ids: std::collections::HashSet<String> =
            (0..1000).map(|_| response_id("cmpl")).collect();
        assert_eq!(ids.len(), 1000);
        let id = response_id("chatcmpl");
        let hex = id.strip_prefix("chatcmpl-").expect("prefix");
        assert_eq!(hex.len(), 32);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
        let fp = system_fingerprint("m");
        assert_eq!(fp, system_fingerprint("m"));
        assert_ne!(fp, system_fingerprint("n"));
        assert_eq!(fp.len(), "fp_kestrel_".len() + 10);
    }
}
