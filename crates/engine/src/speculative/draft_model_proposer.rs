//! [`DraftModelProposer`]: a smaller model with the target's tokenizer proposes draft tokens
//! by decoding greedily for `k` steps.
//!
//! The draft executor keeps its own KV cache with the target's block size and at least its
//! block count, so the target's block tables index both caches: the draft writes a request's
//! K/V into the same block ids the target uses. For each request it remembers which tokens it
//! has computed under which block table; tokens it has not seen (the prompt, the bonus token,
//! drafts the target rejected, anything after a preemption moved the blocks) are computed
//! again in the first draft step, which is a catch-up prefill. Stale draft K/V (a freed block
//! reused by another request's draft) only lowers the acceptance rate: the target verifies
//! every draft token.

use crate::executor::{BatchInput, BatchOutput, Executor, ExecutorError, SeqBatch};
use crate::sampling::argmax;

use super::proposer::{DraftSeq, Proposer};
use super::spec_state::SpecState;

/// Proposes with a draft model run by its own executor. What its cache holds for a request is
/// kept in that request's [`SpecState`].
pub struct DraftModelProposer {
    executor: Box<dyn Executor>,
    block_size: usize,
    batch: BatchInput,
    out: BatchOutput,
}

impl DraftModelProposer {
    /// Proposes with `executor`, whose KV cache must use `block_size` tokens per block and hold
    /// at least the target's block count.
    pub fn new(executor: Box<dyn Executor>) -> Self {
        let block_size = executor.kv_geometry().block_size;
        DraftModelProposer {
            executor,
            block_size,
            batch: BatchInput::default(),
            out: BatchOutput::default(),
        }
    }

    /// How many leading tokens of `s` (at most all but the last) the draft cache holds.
    fn valid_prefix(&self, s: &DraftSeq<'_>) -> usize {
        let seen = s.state.draft_cache();
        let same_tokens = seen
            .tokens
            .iter()
            .zip(s.tokens)
            .take_while(|(a, b)| a == b)
            .count();
        let same_blocks = seen
            .table
            .iter()
            .zip(s.block_table)
            .take_while(|(a, b)| a == b)
            .count();
        same_tokens
            .min(same_blocks * self.block_size)
            .min(s.tokens.len().saturating_sub(1))
    }

    /// Runs the draft over `self.batch` and appends each row's argmax to the drafts of the
    /// sequences `rows` names.
    fn run(&mut self, rows: &[usize], drafts: &mut [Vec<u32>]) -> Result<(), ExecutorError> {
        let mut out = std::mem::take(&mut self.out);
        let result = self.executor.execute_into(&self.batch, &mut out);
        self.out = out;
        result?;
        if self.out.num_rows() != rows.len() {
            return Err(ExecutorError::Failed(format!(
                "draft model returned {} rows for {} sequences",
                self.out.num_rows(),
                rows.len()
            )));
        }
        for (r, &j) in rows.iter().enumerate() {
            let t = argmax(self.out.row(r))
                .ok_or_else(|| ExecutorError::Failed("draft logits are not finite".into()))?;
            drafts[j].push(t);
        }
        Ok(())
    }

    fn propose_all(
        &mut self,
        seqs: &[DraftSeq<'_>],
        drafts: &mut [Vec<u32>],
    ) -> Result<(), ExecutorError> {
        let bs = self.block_size;
        // Step 1: catch up on unseen tokens through the last one; its row gives d1.
        self.batch.seqs.clear();
        let mut rows = Vec::with_capacity(seqs.len());
        for (j, s) in seqs.iter().enumerate() {
            if s.k == 0 || s.tokens.is_empty() {
                continue;
            }
            let from = self.valid_prefix(s);
            let len = s.tokens.len();
            self.batch.seqs.push(SeqBatch {
                request_id: s.request_id,
                tokens: s.tokens[from..].to_vec(),
                start_pos: from,
                block_table: s.block_table[..len.div_ceil(bs).min(s.block_table.len())].to_vec(),
                num_logits: 1,
                adapter: None,
            });
            rows.push(j);
        }
        if rows.is_empty() {
            return Ok(());
        }
        self.run(&rows, drafts)?;
        // Steps 2..k: one token each, for sequences that want more.
        let max_k = seqs.iter().map(|s| s.k).max().unwrap_or(0);
        for i in 2..=max_k {
            self.batch.seqs.clear();
            rows.clear();
            for (j, s) in seqs.iter().enumerate() {
                if s.k < i || drafts[j].len() != i - 1 {
                    continue;
                }
                let pos = s.tokens.len() + i - 2;
                self.batch.seqs.push(SeqBatch {
                    request_id: s.request_id,
                    tokens: vec![drafts[j][i - 2]],
                    start_pos: pos,
                    block_table: s.block_table[..(pos + 1).div_ceil(bs).min(s.block_table.len())]
                        .to_vec(),
                    num_logits: 1,
                    adapter: None,
                });
                rows.push(j);
            }
            self.run(&rows, drafts)?;
        }
        Ok(())
    }
}

impl Proposer for DraftModelProposer {
    fn lookahead(&mut self, _state: &mut SpecState, _tokens: &[u32], k: usize) -> usize {
        k
    }

    fn propose(
        &mut self,
        seqs: &mut [DraftSeq<'_>],
        drafts: &mut Vec<Vec<u32>>,
    ) -> Result<(), ExecutorError> {
        drafts.clear();
        drafts.resize(seqs.len(), Vec::new());
        if let Err(e) = self.propose_all(seqs, drafts) {
            for s in seqs.iter_mut() {
                *s.state.draft_cache_mut() = Default::default();
            }
            return Err(e);
        }
        for (s, d) in seqs.iter_mut().zip(drafts.iter()) {
            // The draft computed the context and every draft token but the last.
            let seen = s.state.draft_cache_mut();
            seen.tokens.clear();
            seen.tokens.extend_from_slice(s.tokens);
            seen.tokens
                .extend_from_slice(&d[..d.len().saturating_sub(1)]);
            let blocks = seen.tokens.len().div_ceil(self.block_size);
            seen.table.clear();
            seen.table
                .extend_from_slice(&s.block_table[..blocks.min(s.block_table.len())]);
        }
        Ok(())
    }
}
