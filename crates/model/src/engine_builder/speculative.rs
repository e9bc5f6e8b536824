//! [`SpeculativeOptions`]: `--speculative-method ngram|draft` and its settings, turned into the
//! engine's [`Speculator`] by [`speculator`] (which [`super::EngineBuilder`] calls). A draft
//! model must share the target's tokenizer: same vocabulary, same token pieces, same
//! end-of-generation ids.

use std::path::PathBuf;
use std::str::FromStr;

use kestrel_engine::speculative::{
    DraftModelProposer, NgramProposer, Proposer, SpeculativeConfig, Speculator,
};

use crate::runner::KvSpec;
use crate::tokenizer::Tokenizer;
use crate::{LoadedModel, ModelRunner, ThreadPool};

/// Where draft tokens come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethod {
    /// Prompt lookup: n-gram matches in the request's own tokens.
    Ngram,
    /// A smaller draft model with the same tokenizer.
    Draft,
}

impl FromStr for SpecMethod {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ngram" => Ok(SpecMethod::Ngram),
            "draft" => Ok(SpecMethod::Draft),
            other => Err(format!(
                "unknown speculative method {other:?} (use ngram or draft)"
            )),
        }
    }
}

/// Speculative-decoding settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeculativeOptions {
    pub method: SpecMethod,
    /// The draft model file (`--draft-model`), for [`SpecMethod::Draft`].
    pub draft_model: Option<PathBuf>,
    /// Draft tokens per request and step (`--num-speculative-tokens`).
    pub num_speculative_tokens: usize,
    /// Shortest and longest suffix n-gram looked up (`--prompt-lookup-min/max`).
    pub prompt_lookup_min: usize,
    pub prompt_lookup_max: usize,
    /// Back-off threshold in tokens (`--speculative-max-batch-tokens`).
    pub max_batch_tokens: usize,
    /// Whether draft lengths follow each request's acceptance (off with
    /// `--speculative-fixed-length`).
    pub adaptive_length: bool,
}

impl SpeculativeOptions {
    /// `method` with the defaults: 4 draft tokens, n-grams of 4 down to 2 tokens.
    pub fn new(method: SpecMethod) -> Self {
        SpeculativeOptions {
            method,
            draft_model: None,
            num_speculative_tokens: 4,
            prompt_lookup_min: 2,
            prompt_lookup_max: 4,
            max_batch_tokens: SpeculativeConfig::DEFAULT_MAX_BATCH_TOKENS,
            adaptive_length: true,
        }
    }

    /// Checks the settings that do not need the models.
    pub fn validate(&self) -> Result<(), SpeculativeError> {
        if self.num_speculative_tokens == 0 {
            return Err(SpeculativeError::Invalid(
                "--num-speculative-tokens must be at least 1".into(),
            ));
        }
        if self.prompt_lookup_min == 0 || self.prompt_lookup_min > self.prompt_lookup_max {
            return Err(SpeculativeError::Invalid(format!(
                "--prompt-lookup-min ({}) must be between 1 and --prompt-lookup-max ({})",
                self.prompt_lookup_min, self.prompt_lookup_max
            )));
        }
        match (self.method, &self.draft_model) {
            (SpecMethod::Draft, None) => Err(SpeculativeError::Invalid(
                "--speculative-method draft needs --draft-model PATH".into(),
            )),
            (SpecMethod::Ngram, Some(_)) => Err(SpeculativeError::Invalid(
                "--draft-model needs --speculative-method draft".into(),
            )),
            _ => Ok(()),
        }
    }

    fn config(&self) -> SpeculativeConfig {
        SpeculativeConfig {
            num_speculative_tokens: self.num_speculative_tokens,
            max_batch_tokens: self.max_batch_tokens,
            adaptive_length: self.adaptive_length,
        }
    }
}

/// Why speculative decoding cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SpeculativeError {
    #[error("{0}")]
    Invalid(String),
    #[error("--speculative-method draft needs the draft model loaded")]
    NoDraft,
    #[error("the draft model {draft} does not share the target's tokenizer: {why}")]
    TokenizerMismatch { draft: String, why: String },
}

/// The engine's speculator for `opts`: an n-gram proposer, or a draft-model proposer over
/// `draft` with a KV cache of `kv`'s block size and block count (so the target's block tables
/// index it) and storage type.
pub fn speculator(
    opts: &SpeculativeOptions,
    target: &Tokenizer,
    draft: Option<LoadedModel>,
    kv: KvSpec,
    pool: &'static ThreadPool,
) -> Result<Speculator, SpeculativeError> {
    opts.validate()?;
    let proposer: Box<dyn Proposer> = match opts.method {
        SpecMethod::Ngram => Box::new(NgramProposer::new(
            opts.prompt_lookup_min,
            opts.prompt_lookup_max,
        )),
        SpecMethod::Draft => {
            let draft = draft.ok_or(SpeculativeError::NoDraft)?;
            check_same_tokenizer(target, &draft.tokenizer).map_err(|why| {
                SpeculativeError::TokenizerMismatch {
                    draft: draft.path.display().to_string(),
                    why,
                }
            })?;
            let runner = ModelRunner::with_kv(draft.model, kv, pool);
            Box::new(DraftModelProposer::new(Box::new(runner)))
        }
    };
    Ok(Speculator::new(opts.config(), proposer))
}

/// Whether `draft` tokenizes exactly as `target`; the first difference otherwise.
pub fn check_same_tokenizer(target: &Tokenizer, draft: &Tokenizer) -> Result<(), String> {
    if target.vocab_size() != draft.vocab_size() {
        return Err(format!(
            "vocabulary of {} tokens, the target has {}",
            draft.vocab_size(),
            target.vocab_size()
        ));
    }
    if target.eos_ids() != draft.eos_ids() {
        return Err(format!(
            "end-of-generation ids {:?}, the target has {:?}",
            draft.eos_ids(),
            target.eos_ids()
        ));
    }
    for id in 0..target.vocab_size() as u32 {
        let (t, d) = (target.token_to_piece(id), draft.token_to_piece(id));
        if t != d {
            return Err(format!("token {id} is {d:?}, the target's is {t:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        let mut o = SpeculativeOptions::new(SpecMethod::Draft);
        assert!(o.validate().is_err(), "draft without a path");
        o.draft_model = Some("d.gguf".into());
        assert!(o.validate().is_ok());
        o.num_speculative_tokens = 0;
        assert!(o.validate().is_err());
        let mut n = SpeculativeOptions::new(SpecMethod::Ngram);
        n.prompt_lookup_min = 5;
        assert!(n.validate().is_err(), "min above max");
        assert_eq!("ngram".parse(), Ok(SpecMethod::Ngram));
        assert!("eagle".parse::<SpecMethod>().is_err());
    }
}
