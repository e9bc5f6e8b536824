//! The tokenizer as the token environment constrained decoding needs: every token's bytes and
//! the end-of-generation ids, from which the engine's [`ConstraintFactory`] is built.

use std::sync::Arc;

use kestrel_engine::constraint::{ConstraintError, ConstraintFactory, TokEnv};
use toktrie_hf_tokenizers::ByteTokenizer;

use super::Tokenizer;

impl Tokenizer {
    /// The token environment over `logits_width` ids (the model's logits row; ids past the
    /// tokenizer's vocabulary are never allowed by a grammar). The end-of-generation ids are
    /// those a completed grammar allows.
    pub fn token_env(&self, logits_width: usize) -> Result<TokEnv, ConstraintError> {
        let mut bytes = ByteTokenizer::from_tokenizer(self.inner.clone())
            .map_err(|e| ConstraintError::TokenEnv(e.to_string()))?;
        let vocab = bytes.tokrx_info().vocab_size;
        let eos: Vec<u32> = self.eog.iter().copied().filter(|&id| id < vocab).collect();
        if !eos.is_empty() {
            bytes.set_eos_tokens(&eos);
        }
        let n_vocab = (logits_width > vocab as usize).then_some(logits_width);
        bytes
            .into_tok_env(n_vocab)
            .map_err(|e| ConstraintError::TokenEnv(e.to_string()))
    }

    /// The grammar compiler for this tokenizer over `logits_width` ids, built once per model.
    pub fn constraint_factory(
        &self,
        logits_width: usize,
    ) -> Result<Arc<ConstraintFactory>, ConstraintError> {
        ConstraintFactory::new(&self.token_env(logits_width)?).map(Arc::new)
    }
}
