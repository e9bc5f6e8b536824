//! [`ModelRunner`]: the engine's [`Executor`] for a loaded model. It owns the KV cache memory and
//! the activation workspace and the LoRA adapters loaded beside the model, validates each
//! batch, and runs the forward pass.

use std::path::Path;
use std::sync::Arc;

use kestrel_engine::adapter_id::AdapterId;

use kestrel_engine::executor::{
    BatchInput, BatchOutput, Executor, ExecutorError, KvGeometry, PoolBusy,
};
use kestrel_engine::expert_counts::ExpertTokenCounts;
use kestrel_engine::kv::{BlockId, NO_BLOCK};
use kestrel_kernels::cpu::attention::KvDtype;
use kestrel_kernels::cpu::threadpool::ThreadPool;

use crate::arch::{DecoderModel, Pass, Workspace};
use crate::kv_cache::{KvCache, KvCacheShape};
use crate::lora::{LoraAdapter, LoraBatch, LoraError, LoraRegistry};

/// Size and storage type of a runner's KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvSpec {
    /// Tokens per block.
    pub block_size: usize,
    pub num_blocks: usize,
    pub dtype: KvDtype,
}

/// How much KV cache to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvBudget {
    /// A memory budget in bytes.
    Bytes(u64),
    /// A number of token slots.
    Tokens(usize),
}

/// Why a KV budget cannot hold a cache.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvSizeError {
    #[error("the KV cache budget holds no block of {block_size} tokens; at least one is needed (raise --kv-cache-memory or --kv-cache-tokens)")]
    TooSmall { block_size: usize },
    #[error("the KV block size must be at least 1 token (--block-size), got 0")]
    ZeroBlockSize,
}

impl KvSpec {
    /// The cache that `budget` buys for `model`: as many whole blocks of `block_size` tokens
    /// stored as `dtype` as fit.
    ///
    /// ```text
    /// blocks          = bytes / (bytes_per_token × block_size)    (or tokens / block_size)
    /// bytes_per_token = layers × 2 × kv heads × row bytes (f32 4·hd, f16 2·hd, q8 hd+4)
    /// ```
    pub fn for_budget(
        model: &DecoderModel,
        block_size: usize,
        dtype: KvDtype,
        budget: KvBudget,
    ) -> Result<KvSpec, KvSizeError> {
        if block_size == 0 {
            return Err(KvSizeError::ZeroBlockSize);
        }
        let mut spec = KvSpec {
            block_size,
            num_blocks: 0,
            dtype,
        };
        spec.num_blocks = match budget {
            KvBudget::Bytes(b) => spec
                .shape(model)
                .blocks_for_bytes(usize::try_from(b).unwrap_or(usize::MAX)),
            KvBudget::Tokens(t) => t / block_size.max(1),
        };
        if spec.num_blocks == 0 {
            return Err(KvSizeError::TooSmall { block_size });
        }
        Ok(spec)
    }

    /// The cache shape for `model`'s layers and heads.
    pub fn shape(&self, model: &DecoderModel) -> KvCacheShape {
        let d = model.dims();
        KvCacheShape {
            n_layers: d.n_layers,
            n_kv_heads: d.n_kv_heads,
            head_dim: d.head_dim,
            block_size: self.block_size,
            num_blocks: self.num_blocks,
            dtype: self.dtype,
            keys_only: d.keys_only,
        }
    }
}

pub struct ModelRunner {
    model: DecoderModel,
    kv: KvCache,
    ws: Workspace,
    pool: &'static ThreadPool,
    logit_rows: Vec<usize>,
    adapters: LoraRegistry,
    /// This step's rows grouped by adapter.
    lora: LoraBatch,
}

impl ModelRunner {
    /// A runner with `num_blocks` f32 KV blocks of `block_size` tokens.
    pub fn new(
        model: DecoderModel,
        block_size: usize,
        num_blocks: usize,
        pool: &'static ThreadPool,
    ) -> ModelRunner {
        Self::with_kv(
            model,
            KvSpec {
                block_size,
                num_blocks,
                dtype: KvDtype::F32,
            },
            pool,
        )
    }

    /// A runner whose KV cache has the size and storage type of `kv`.
    pub fn with_kv(model: DecoderModel, kv: KvSpec, pool: &'static ThreadPool) -> ModelRunner {
        let shape = kv.shape(&model);
        ModelRunner {
            model,
            kv: KvCache::new(shape),
            ws: Workspace::default(),
            pool,
            logit_rows: Vec::new(),
            adapters: LoraRegistry::new(),
            lora: LoraBatch::none(),
        }
    }

    /// The LoRA adapters sequences may run with.
    pub fn adapters(&self) -> &LoraRegistry {
        &self.adapters
    }

    /// Load and unload adapters (a batch naming an unloaded adapter is refused).
    pub fn adapters_mut(&mut self) -> &mut LoraRegistry {
        &mut self.adapters
    }

    /// Read the adapter at `path` (PEFT directory or llama.cpp adapter GGUF), fit it to the
    /// model and register it as `name`.
    pub fn load_adapter(&mut self, name: &str, path: &Path) -> Result<AdapterId, LoraError> {
        let adapter = LoraAdapter::open(name, path, self.model.lora_base())?;
        self.adapters.load(adapter)
    }

    pub fn model(&self) -> &DecoderModel {
        &self.model
    }

    /// The model, for its run-time settings (the cache and its contents stay as they are).
    pub fn model_mut(&mut self) -> &mut DecoderModel {
        &mut self.model
    }

    pub fn kv_shape(&self) -> KvCacheShape {
        self.kv.shape()
    }

    /// Like [`Executor::execute`] but returns the logits of every token of the batch, in order
    /// (for perplexity and teacher-forced checks).
    pub fn execute_all_logits(&mut self, input: &BatchInput) -> Result<BatchOutput, ExecutorError> {
        self.validate(input)?;
        self.resolve_adapters(input)?;
        self.logit_rows.clear();
        self.logit_rows.extend(0..input.num_tokens());
        Ok(self.run(input))
    }

    fn run(&mut self, input: &BatchInput) -> BatchOutput {
        let mut out = BatchOutput {
            vocab: self.model.dims().vocab,
            logits: Vec::new(),
        };
        self.run_into(input, &mut out);
        out
    }

    /// The forward pass into `out` (its buffer is reused: no allocation once it has grown).
    fn run_into(&mut self, input: &BatchInput, out: &mut BatchOutput) {
        out.vocab = self.model.dims().vocab;
        let pass = Pass {
            batch: input,
            lora: &self.lora,
            kv: &mut self.kv,
            ws: &mut self.ws,
            pool: self.pool,
        };
        self.model.forward(pass, &self.logit_rows, &mut out.logits);
    }

    /// Logits rows of a step: the last `num_logits` tokens of each sequence (one for an
    /// ordinary step, more when draft tokens are verified), in batch order.
    fn sampled_rows(&mut self, input: &BatchInput) {
        self.logit_rows.clear();
        let mut end = 0;
        for s in &input.seqs {
            end += s.tokens.len();
            let k = s.num_logits.min(s.tokens.len());
            self.logit_rows.extend(end - k..end);
        }
    }

    /// Group the batch's rows by adapter; a sequence naming an adapter that is not loaded makes
    /// the batch invalid.
    fn resolve_adapters(&mut self, input: &BatchInput) -> Result<(), ExecutorError> {
        self.lora
            .resolve(input, &self.adapters)
            .map_err(|id| ExecutorError::InvalidBatch(format!("LoRA {id} is not loaded")))
    }

    /// Reject batches the forward pass cannot run safely. A block-table entry may be
    /// [`NO_BLOCK`] (released) only if it lies wholly before the first token's window in every
    /// layer, so that no layer reads or writes it.
    fn validate(&self, input: &BatchInput) -> Result<(), ExecutorError> {
        let vocab = self.model.dims().vocab;
        let shape = self.kv.shape();
        for (i, s) in input.seqs.iter().enumerate() {
            if let Some(t) = s.tokens.iter().find(|t| **t as usize >= vocab) {
                return Err(ExecutorError::InvalidBatch(format!(
                    "sequence {i}: token id {t} is outside the vocabulary ({vocab})"
                )));
            }
            let end = s.start_pos + s.tokens.len();
            if s.block_table.len() * shape.block_size < end {
                return Err(ExecutorError::InvalidBatch(format!(
                    "sequence {i}: block table of {} blocks cannot hold {end} positions",
                    s.block_table.len()
                )));
            }
            let released = self.model.attention_window().map_or(0, |w| {
                (s.start_pos + 1).saturating_sub(w) / shape.block_size
            });
            if let Some((j, b)) =
                s.block_table.iter().enumerate().find(|&(j, &b)| {
                    b as usize >= shape.num_blocks && !(j < released && b == NO_BLOCK)
                })
            {
                return Err(ExecutorError::InvalidBatch(format!(
                    "sequence {i}: block id {b} at table entry {j} is out of range"
                )));
            }
        }
        Ok(())
    }
}

impl Executor for ModelRunner {
    fn execute(&mut self, input: &BatchInput) -> Result<BatchOutput, ExecutorError> {
        self.validate(input)?;
        self.resolve_adapters(input)?;
        self.sampled_rows(input);
        Ok(self.run(input))
    }

    fn execute_into(
        &mut self,
        input: &BatchInput,
        out: &mut BatchOutput,
    ) -> Result<(), ExecutorError> {
        self.validate(input)?;
        self.resolve_adapters(input)?;
        self.sampled_rows(input);
        self.run_into(input, out);
        Ok(())
    }

    fn vocab_size(&self) -> usize {
        self.model.dims().vocab
    }

    fn kv_geometry(&self) -> KvGeometry {
        let shape = self.kv.shape();
        KvGeometry {
            block_size: shape.block_size,
            num_blocks: shape.num_blocks,
            attention_window: self.model.attention_window(),
        }
    }

    fn expert_token_counts(&self) -> Option<Arc<ExpertTokenCounts>> {
        self.model.expert_token_counts()
    }

    fn pool_busy(&self) -> Option<PoolBusy> {
        Some(PoolBusy {
            threads: self.pool.n_threads(),
            busy: self.pool.busy_time(),
        })
    }

    fn kv_block_bytes(&self, block: BlockId) -> Option<Vec<u8>> {
        self.kv.block_bytes(block as usize)
    }

    fn set_kv_block_bytes(&mut self, block: BlockId, bytes: &[u8]) -> bool {
        self.kv.set_block_bytes(block as usize, bytes)
    }

    /// Reads and fits the adapter (the loader's error message comes back as
    /// [`ExecutorError::Adapter`]) and registers it as `id`.
    fn load_adapter(
        &mut self,
        id: AdapterId,
        name: &str,
        path: &Path,
    ) -> Result<usize, ExecutorError> {
        let adapter = LoraAdapter::open(name, path, self.model.lora_base())
            .map_err(|e| ExecutorError::Adapter(e.to_string()))?;
        let rank = adapter.rank();
        self.adapters
            .insert(id, adapter)
            .map_err(|e| ExecutorError::Adapter(e.to_string()))?;
        Ok(rank)
    }

    fn unload_adapter(&mut self, id: AdapterId) {
        self.adapters.remove(id);
    }

    /// The last token's final hidden state (after the final norm) of each sequence.
    fn embed(&mut self, input: &BatchInput) -> Result<Vec<f32>, ExecutorError> {
        self.validate(input)?;
        self.resolve_adapters(input)?;
        self.logit_rows.clear();
        let mut end = 0;
        for s in &input.seqs {
            if s.tokens.is_empty() {
                return Err(ExecutorError::InvalidBatch(
                    "an embedding sequence has no tokens".into(),
                ));
            }
            end += s.tokens.len();
            self.logit_rows.push(end - 1);
        }
        let pass = Pass {
            batch: input,
            lora: &self.lora,
            kv: &mut self.kv,
            ws: &mut self.ws,
            pool: self.pool,
        };
        let mut hidden = Vec::new();
        self.model
            .forward_hidden(pass, &self.logit_rows, &mut hidden);
        Ok(hidden)
    }
}
