//! The boundary between the engine and the model: the engine schedules a [`BatchInput`], an
//! [`Executor`] (the model runner, or a mock in tests) runs one forward pass over it and returns
//! logits rows for the sequences that sample this step.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::adapter_id::AdapterId;
use crate::expert_counts::ExpertTokenCounts;
use crate::kv::BlockId;
use crate::request::RequestId;

/// One sequence's share of a step: the tokens it computes now (a prefill chunk or one decode
/// token), where they start, and the KV blocks that hold its context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqBatch {
    /// The request this sequence belongs to.
    pub request_id: RequestId,
    /// Tokens to run this step, at positions `start_pos..start_pos + tokens.len()`.
    pub tokens: Vec<u32>,
    /// Number of this sequence's tokens already in the KV cache (its computed tokens).
    pub start_pos: usize,
    /// Physical KV block ids, in logical order; covers `start_pos + tokens.len()` positions.
    /// Leading entries may be [`crate::kv::NO_BLOCK`]: released because they lie before the
    /// attention window of the first token (see [`KvGeometry::attention_window`]), so no layer
    /// reads them.
    pub block_table: Vec<BlockId>,
    /// How many logits rows this sequence wants: those of its last `num_logits` tokens, in
    /// order (0 for a non-final prefill chunk, 1 for an ordinary step, `k + 1` when the last
    /// `k` tokens are draft tokens to verify).
    pub num_logits: usize,
    /// The LoRA adapter this sequence runs with (`None`: the base model alone).
    pub adapter: Option<AdapterId>,
}

/// A ragged batch: every sequence contributes its own number of tokens, with no padding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchInput {
    pub seqs: Vec<SeqBatch>,
}

impl BatchInput {
    /// Total tokens computed in this step.
    pub fn num_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.tokens.len()).sum()
    }

    /// Total logits rows the step returns.
    pub fn num_logits(&self) -> usize {
        self.seqs.iter().map(|s| s.num_logits).sum()
    }
}

/// Logits rows in batch order, `vocab` wide: each sequence's [`SeqBatch::num_logits`] rows.
#[derive(Debug, Clone, Default)]
pub struct BatchOutput {
    pub vocab: usize,
    pub logits: Vec<f32>,
}

impl BatchOutput {
    /// The `i`-th logits row.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.vocab..(i + 1) * self.vocab]
    }

    pub fn num_rows(&self) -> usize {
        self.logits.len().checked_div(self.vocab).unwrap_or(0)
    }
}

/// Why a forward pass failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ExecutorError {
    #[error("batch is invalid: {0}")]
    InvalidBatch(String),
    #[error("model execution failed: {0}")]
    Failed(String),
    /// A LoRA adapter could not be loaded (the loader's message).
    #[error("{0}")]
    Adapter(String),
}

/// The shape of an executor's paged KV cache: the scheduler's block ids index it, so the
/// engine derives its block bookkeeping from this instead of being told separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvGeometry {
    /// Token slots per block.
    pub block_size: usize,
    /// Blocks in the cache.
    pub num_blocks: usize,
    /// The attention window that bounds every layer, in tokens: `Some(w)` only if every layer
    /// has a sliding window (then `w` is the largest), `None` if any layer attends to the whole
    /// context. The engine releases blocks outside it while a request runs.
    pub attention_window: Option<usize>,
}

/// The compute threads of an executor: how many, and the time they have spent working since
/// they started (their CPU utilisation is the rate of `busy` over `threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolBusy {
    pub threads: usize,
    pub busy: Duration,
}

/// Runs forward passes. The engine thread owns its executor; nothing else touches it.
pub trait Executor: Send {
    /// Run one step over `input`, writing each sequence's new K/V into its blocks.
    fn execute(&mut self, input: &BatchInput) -> Result<BatchOutput, ExecutorError>;
    /// [`execute`](Self::execute) into `out`, reusing its logits buffer (executors that can
    /// run without allocating override this; the engine calls it every step).
    fn execute_into(
        &mut self,
        input: &BatchInput,
        out: &mut BatchOutput,
    ) -> Result<(), ExecutorError> {
        *out = self.execute(input)?;
        Ok(())
    }
    /// Vocabulary size of the logits rows.
    fn vocab_size(&self) -> usize;
    /// The KV cache the executor owns.
    fn kv_geometry(&self) -> KvGeometry;
    /// A mixture-of-experts model's routed-token counters (the engine publishes them as
    /// metrics); `None` for dense models.
    fn expert_token_counts(&self) -> Option<Arc<ExpertTokenCounts>> {
        None
    }
    /// The compute threads' busy time (the engine publishes it); `None` without a pool.
    fn pool_busy(&self) -> Option<PoolBusy> {
        None
    }
    /// Read the LoRA adapter at `path` and keep it as `id` (the engine allocates ids and never
    /// sends a batch naming an adapter it has not loaded); returns the adapter's rank.
    fn load_adapter(
        &mut self,
        id: AdapterId,
        name: &str,
        path: &Path,
    ) -> Result<usize, ExecutorError> {
        let _ = (id, path);
        Err(ExecutorError::Adapter(format!(
            "this executor cannot load LoRA adapters (asked for '{name}')"
        )))
    }
    /// Drop adapter `id` (a no-op if it is not loaded).
    fn unload_adapter(&mut self, id: AdapterId) {
        let _ = id;
    }
    /// A copy of KV block `block` in every layer (for the disk tier to keep); `None` when the
    /// executor cannot hand its KV out.
    fn kv_block_bytes(&self, block: BlockId) -> Option<Vec<u8>> {
        let _ = block;
        None
    }
    /// Writes `bytes` (from [`kv_block_bytes`](Self::kv_block_bytes) of the same model and
    /// KV layout) into block `block`; false, with nothing written, when the executor cannot
    /// or the length is not one block's.
    fn set_kv_block_bytes(&mut self, block: BlockId, bytes: &[u8]) -> bool {
        let _ = (block, bytes);
        false
    }
    /// Run `input` (whole prompts, from position 0) and return, for each sequence, the final
    /// hidden state of its last token (after the final norm, `hidden` wide, not normalised),
    /// concatenated in batch order. The K/V written go to the sequences' blocks, which the
    /// engine allocates for the call and frees after it.
    fn embed(&mut self, input: &BatchInput) -> Result<Vec<f32>, ExecutorError> {
        let _ = input;
        Err(ExecutorError::Failed(
            "this executor cannot compute embeddings".into(),
        ))
    }
}
