//! [`EngineConfig`]: the engine's limits. The KV geometry is not part of it: the executor owns
//! the KV cache and reports its [`KvGeometry`], and [`EngineConfig::scheduler_config`] joins the
//! two.

use crate::adapters::LoraLimits;
use crate::executor::KvGeometry;
use crate::scheduler::SchedulerConfig;

/// Engine limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most requests running at once.
    pub max_num_seqs: usize,
    /// Token budget of one step.
    pub max_num_batched_tokens: usize,
    /// Share full KV blocks between requests with equal prefixes.
    pub enable_prefix_caching: bool,
    /// Context limit of the model (prompt plus output); further clamped to the KV cache.
    pub max_model_len: usize,
    /// Most response streams alive at once; `None` for no limit.
    pub max_concurrent_requests: Option<usize>,
    /// LoRA limits: adapters per step, largest rank, adapters kept resident.
    pub lora: LoraLimits,
}

impl EngineConfig {
    /// The scheduler's configuration over a KV cache of shape `kv`.
    pub fn scheduler_config(&self, kv: KvGeometry) -> SchedulerConfig {
        SchedulerConfig {
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            block_size: kv.block_size,
            num_kv_blocks: kv.num_blocks,
            enable_prefix_caching: self.enable_prefix_caching,
            enable_chunked_prefill: true,
            long_prefill_threshold: None,
            max_model_len: Some(self.max_model_len),
            attention_window: kv.attention_window,
            max_loras: Some(self.lora.max_loras),
            max_preemptions: Some(crate::scheduler::DEFAULT_MAX_PREEMPTIONS),
            // A long prompt takes at most half a step while others wait for a first token.
            contended_prefill_chunk: Some((self.max_num_batched_tokens / 2).max(1)),
        }
    }
}
