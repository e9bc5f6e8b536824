//! `--cache-salt-by-api-key`: each API key gets its own partition of the prefix cache, so one
//! client cannot learn from `cached_tokens` (or from timing) which prompts another key sent.
//!
//! The authentication middleware attaches a [`KeySalt`] to every request it lets through; the
//! generation routes fold it into each engine request's cache salt (before the request's own
//! `cache_salt`, which still partitions further within a key). The salt is a SHA-256 digest of
//! the key, so the key itself is not kept in request state.

use std::sync::Arc;

use kestrel_engine::api::EngineRequest;
use sha2::{Digest, Sha256};

/// The prefix-cache partition of the API key that authenticated a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySalt(Arc<str>);

impl KeySalt {
    /// The salt of the key carried by this `Authorization` header value.
    pub fn of_authorization(header: &[u8]) -> KeySalt {
        let digest = Sha256::digest(header);
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        KeySalt(Arc::from(format!("key:{hex}")))
    }

    /// `req` with its cache salt scoped to `salt` (unchanged without one).
    pub fn apply(salt: Option<&KeySalt>, req: EngineRequest) -> EngineRequest {
        let Some(KeySalt(key)) = salt else { return req };
        let combined = match req.cache_salt() {
            Some(own) => format!("{key}/{own}"),
            None => key.to_string(),
        };
        req.with_cache_salt(Some(combined))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_get_distinct_stable_salts_that_do_not_contain_the_key() {
        let a = KeySalt::of_authorization(b"Bearer sk-alpha");
        let b = KeySalt::of_authorization(b"Bearer sk-beta");
        assert_ne!(a, b);
        assert_eq!(a, KeySalt::of_authorization(b"Bearer sk-alpha"));
        assert!(!a.0.contains("alpha"));
    }
}
