//! [`EngineCore::prompt_logprobs`]: the log-probability of every prompt token given the tokens
//! before it (vLLM's `prompt_logprobs`), from the raw logits of one pass over the prompt with
//! KV blocks lent for the call (see [`crate::prompt_pass`]).
//!
//! The pass runs in chunks of at most [`SCORE_CHUNK`] tokens (and the step budget), each asking
//! for one logits row per token, so the logits held at once stay bounded whatever the prompt's
//! length. It never reads or fills the prefix cache: every position must be computed.

use super::EngineCore;
use crate::adapter_id::AdapterId;
use crate::executor::{BatchInput, BatchOutput, Executor, SeqBatch};
use crate::prompt_pass::{PromptPassError, PromptTokenScore};
use crate::request::RequestId;
use crate::sampling::logprobs;

/// The request id a scoring pass carries (never a real request's, nor an embedding's).
const SCORE_REQUEST_ID: RequestId = RequestId::MAX - 1;

/// Most prompt tokens scored per forward pass (bounds the logits buffer to this many rows).
pub const SCORE_CHUNK: usize = 256;

impl EngineCore {
    /// For each token of `tokens`, its log-probability given the tokens before it and the
    /// `top_n` likeliest tokens and its rank at that position; `None` for the first token, which has no
    /// context. Uses `adapter`'s weights when given (making it resident like a request would).
    pub fn prompt_logprobs(
        &mut self,
        tokens: &[u32],
        top_n: usize,
        adapter: Option<AdapterId>,
    ) -> Result<Vec<Option<PromptTokenScore>>, PromptPassError> {
        self.check_pass_input(tokens)?;
        if let Some(id) = adapter {
            let uses = self.scheduler.adapter_uses();
            self.adapters
                .acquire(id, self.executor.as_mut(), &uses)
                .map_err(|e| PromptPassError::Model(e.to_string()))?;
        }
        let chunk = SCORE_CHUNK.min(self.scheduler.config().max_num_batched_tokens);
        let blocks = self.scheduler.kv().blocks_for(tokens.len());
        let executor = self.executor.as_mut();
        self.scheduler
            .with_scratch_blocks(tokens.len(), |table| {
                let pass = ScorePass {
                    tokens,
                    table,
                    adapter,
                    top_n,
                };
                pass.run(executor, chunk)
            })
            .ok_or(PromptPassError::NoKvSpace { blocks })?
    }
}

/// One scoring pass: the prompt, the lent blocks and what to report.
struct ScorePass<'a> {
    tokens: &'a [u32],
    table: &'a [u32],
    adapter: Option<AdapterId>,
    top_n: usize,
}

impl ScorePass<'_> {
    fn run(
        &self,
        executor: &mut dyn Executor,
        chunk: usize,
    ) -> Result<Vec<Option<PromptTokenScore>>, PromptPassError> {
        let mut scores = Vec::with_capacity(self.tokens.len());
        scores.push(None);
        let mut out = BatchOutput::default();
        for start in (0..self.tokens.len()).step_by(chunk.max(1)) {
            let end = (start + chunk).min(self.tokens.len());
            executor
                .execute_into(&self.input(start, end), &mut out)
                .map_err(|e| PromptPassError::Model(e.to_string()))?;
            self.score_rows(&out, start, end, &mut scores)?;
        }
        Ok(scores)
    }

    /// Positions `start..end`, one logits row each.
    fn input(&self, start: usize, end: usize) -> BatchInput {
        BatchInput {
            seqs: vec![SeqBatch {
                request_id: SCORE_REQUEST_ID,
                tokens: self.tokens[start..end].to_vec(),
                start_pos: start,
                block_table: self.table.to_vec(),
                num_logits: end - start,
                adapter: self.adapter,
            }],
        }
    }

    /// The row of position `p` predicts token `p + 1`; the last prompt position predicts
    /// nothing in the prompt.
    fn score_rows(
        &self,
        out: &BatchOutput,
        start: usize,
        end: usize,
        scores: &mut Vec<Option<PromptTokenScore>>,
    ) -> Result<(), PromptPassError> {
        if out.vocab == 0 || out.num_rows() != end - start {
            return Err(PromptPassError::Model(format!(
                "the executor returned {} logits rows for {} positions",
                out.num_rows(),
                end - start
            )));
        }
        for pos in start..end.min(self.tokens.len() - 1) {
            let (row, next) = (out.row(pos - start), self.tokens[pos + 1]);
            let scored = logprobs(row, next, self.top_n)
                .map_err(|e| PromptPassError::Model(e.to_string()))?;
            scores.push(Some(PromptTokenScore {
                logprobs: scored,
                rank: rank_of(row, next),
            }));
        }
        Ok(())
    }
}

/// 1 + how many tokens have a larger logit than `token` (NaN logits never rank above).
fn rank_of(row: &[f32], token: u32) -> usize {
    let logit = row[token as usize];
    1 + row.iter().filter(|&&l| l > logit).count()
}
