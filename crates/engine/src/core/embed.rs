//! [`EngineCore::embed`]: one prompt through the executor for its final hidden state, with
//! KV blocks borrowed for the call (see [`crate::prompt_pass`]).

use super::EngineCore;
use crate::executor::{BatchInput, SeqBatch};
use crate::prompt_pass::PromptPassError;
use crate::request::RequestId;

/// The request id an embedding pass carries (never a real request's).
const EMBED_REQUEST_ID: RequestId = RequestId::MAX;

impl EngineCore {
    /// Refuses a pass over `tokens` that is empty, names a token outside the vocabulary or
    /// exceeds the context limit.
    pub(super) fn check_pass_input(&self, tokens: &[u32]) -> Result<(), PromptPassError> {
        let limits = self.limits();
        if tokens.is_empty() {
            return Err(PromptPassError::EmptyInput);
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= limits.vocab_size) {
            return Err(PromptPassError::TokenOutOfVocab {
                token,
                vocab: limits.vocab_size,
            });
        }
        if tokens.len() > limits.max_model_len {
            return Err(PromptPassError::TooLong {
                len: tokens.len(),
                max: limits.max_model_len,
            });
        }
        Ok(())
    }

    /// The final hidden state of the last token of `tokens` (after the final norm, not
    /// normalised), computed in one pass with blocks lent for the call and freed after it.
    pub fn embed(&mut self, tokens: &[u32]) -> Result<Vec<f32>, PromptPassError> {
        self.check_pass_input(tokens)?;
        let blocks = self.scheduler.kv().blocks_for(tokens.len());
        let executor = &mut self.executor;
        self.scheduler
            .with_scratch_blocks(tokens.len(), |table| {
                let input = BatchInput {
                    seqs: vec![SeqBatch {
                        request_id: EMBED_REQUEST_ID,
                        tokens: tokens.to_vec(),
                        start_pos: 0,
                        block_table: table.to_vec(),
                        num_logits: 1,
                        adapter: None,
                    }],
                };
                executor
                    .embed(&input)
                    .map_err(|e| PromptPassError::Model(e.to_string()))
            })
            .ok_or(PromptPassError::NoKvSpace { blocks })?
    }
}
