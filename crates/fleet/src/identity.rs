//! [`ModelIdentity`]: which model a job was prepared for, and which model a worker runs. The
//! served name alone cannot tell: two workers may announce one name over different weights, a
//! different quantization, tokenizer, chat template or context limit, and a job tokenized for
//! one must never run on the other. So an identity is the name plus a fingerprint: the SHA-256
//! over every input that decides what a prompt turns into.
//!
//! ```text
//! weights         SHA-256 of the GGUF file or checkpoint directory (cached beside it); covers
//!                 the architecture, RoPE settings and everything else the file configures
//! quantization    --quantize and its group size, or none
//! dtype           the weight type the model reports
//! kv_cache_dtype  f16, f32 or q8: the cache's rounding changes greedy text
//! tokenizer       the tokenizer.json text and special ids the gateway tokenizes with
//! chat_template   the Jinja source chat requests are rendered with
//! tool_calls      the tool-call format replies are parsed with
//! limits          vocabulary, context length, input and total token limits
//! ```
//!
//! Redis keys of a model's queues carry [`ModelIdentity::key`], so a worker reads only jobs
//! prepared for exactly its model.

use std::fmt;

use kestrel_model::weights::digest::{hex, WeightsDigest};
use kestrel_server::launch::Launched;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::FleetError;

/// Hex digits of the fingerprint that appear in key names and logs.
const SHORT: usize = 16;

/// A served model: the name clients give and the fingerprint of what decides its output.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// The name clients give as `model` (`--served-model-name`).
    pub name: String,
    /// Hex SHA-256 over the [`FingerprintParts`].
    pub fingerprint: String,
}

impl ModelIdentity {
    /// This identity's part of Redis key names: the name with every character outside
    /// `[A-Za-z0-9._-]` percent-escaped (so no separator or glob character comes from a
    /// client-visible name), `@`, and the fingerprint's first 16 hex digits.
    pub fn key(&self) -> String {
        format!("{}@{}", escape(&self.name), self.short())
    }

    /// The fingerprint's first 16 hex digits.
    pub fn short(&self) -> &str {
        self.fingerprint
            .get(..SHORT)
            .unwrap_or(self.fingerprint.as_str())
    }
}

impl fmt::Display for ModelIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.short())
    }
}

/// `name` with the characters outside `[A-Za-z0-9._-]` written as `%XX` per UTF-8 byte.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The named inputs a fingerprint covers, in a fixed order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FingerprintParts {
    parts: Vec<(&'static str, String)>,
}

impl FingerprintParts {
    /// The parts with `name` set to `value` (added after the others).
    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.parts.push((name, value.into()));
        self
    }

    /// Hex SHA-256 over each part's name and value, both length-framed (so no two different
    /// sets of parts hash alike).
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        for (name, value) in &self.parts {
            for field in [name.as_bytes(), value.as_bytes()] {
                hasher.update((field.len() as u64).to_le_bytes());
                hasher.update(field);
            }
        }
        hex(&hasher.finalize())
    }
}

/// What the worker was started with beyond the engine itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadSettings {
    /// `--quantize` with its group size (e.g. `int4/128`); `None`: loaded as stored.
    pub quantization: Option<String>,
}

/// The identity of a started engine whose weights hash to `weights`.
pub fn identify(
    launched: &Launched,
    weights: &WeightsDigest,
    settings: &LoadSettings,
) -> Result<ModelIdentity, FleetError> {
    let tokenizer = launched
        .model
        .tokenizer
        .to_spec()
        .map_err(|e| FleetError::Model(e.to_string()))?;
    let tokenizer = serde_json::to_string(&tokenizer)?;
    let request = launched.engine.limits();
    let parts = FingerprintParts::default()
        .with("weights", weights.0.clone())
        .with(
            "quantization",
            settings.quantization.clone().unwrap_or_default(),
        )
        .with("dtype", launched.model.dtype.clone())
        .with("kv_cache_dtype", launched.kv_cache.dtype.to_string())
        .with("tokenizer", tokenizer)
        .with(
            "chat_template",
            launched
                .model
                .chat_template
                .as_ref()
                .map(|t| t.source().to_string())
                .unwrap_or_default(),
        )
        .with(
            "tool_calls",
            launched
                .model
                .tool_call_format
                .map(|f| format!("{f:?}"))
                .unwrap_or_default(),
        )
        .with(
            "limits",
            format!(
                "vocab={} model_len={} input={} total={}",
                request.vocab_size,
                request.max_model_len,
                launched.limits.max_input_tokens,
                launched.limits.max_total_tokens
            ),
        );
    Ok(ModelIdentity {
        name: launched.model.model_id.clone(),
        fingerprint: parts.fingerprint(),
    })
}

/// Why a job may not run on a worker serving `mine`; `None` when it was prepared for it.
pub fn mismatch(job: Option<&ModelIdentity>, mine: &ModelIdentity) -> Option<String> {
    match job {
        Some(theirs) if theirs == mine => None,
        Some(theirs) => Some(format!(
            "the job was prepared for model {theirs} ({}) and this worker serves {mine} ({}); \
             it was not run",
            theirs.fingerprint, mine.fingerprint
        )),
        None => Some(format!(
            "the job names no model identity (queued by an older gateway or by hand) and this \
             worker serves {mine}; it was not run"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, fp: &str) -> ModelIdentity {
        ModelIdentity {
            name: name.into(),
            fingerprint: fp.into(),
        }
    }

    #[test]
    fn keys_escape_the_name_and_shorten_the_fingerprint() {
        let fp = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(id("smol-2.q4_1", fp).key(), "smol-2.q4_1@0123456789abcdef");
        assert_eq!(id("a:b*c d", fp).key(), "a%3Ab%2Ac%20d@0123456789abcdef");
        assert_eq!(id("é", fp).key(), "%C3%A9@0123456789abcdef");
        assert_eq!(id("x", fp).to_string(), "x@0123456789abcdef");
        // Two names that escape differently never share keys, even with one fingerprint.
        assert_ne!(id("a%3A", fp).key(), id("a:", fp).key());
    }

    #[test]
    fn every_part_and_its_framing_change_the_fingerprint() {
        let base = FingerprintParts::default()
            .with("weights", "w")
            .with("dtype", "Q4_1");
        let same = FingerprintParts::default()
            .with("weights", "w")
            .with("dtype", "Q4_1");
        assert_eq!(base.fingerprint(), same.fingerprint());
        assert_eq!(base.fingerprint().len(), 64);
        let other_value = FingerprintParts::default()
            .with("weights", "w")
            .with("dtype", "Q8_0");
        assert_ne!(base.fingerprint(), other_value.fingerprint());
        // The bytes "w" + "Q4_1" split differently are a different set of parts.
        let shifted = FingerprintParts::default()
            .with("weights", "wQ")
            .with("dtype", "4_1");
        assert_ne!(base.fingerprint(), shifted.fingerprint());
        let extra = base.clone().with("kv_cache_dtype", "q8");
        assert_ne!(base.fingerprint(), extra.fingerprint());
    }

    #[test]
    fn only_a_job_of_the_same_identity_may_run() {
        let mine = id("a", &"1".repeat(64));
        assert_eq!(mismatch(Some(&mine), &mine), None);
        let other_file = id("a", &"2".repeat(64));
        let why = mismatch(Some(&other_file), &mine).unwrap();
        assert!(
            why.contains(&"2".repeat(64)) && why.contains("not run"),
            "{why}"
        );
        let other_name = id("b", &"1".repeat(64));
        assert!(mismatch(Some(&other_name), &mine).is_some());
        assert!(mismatch(None, &mine).unwrap().contains("no model identity"));
    }
}
