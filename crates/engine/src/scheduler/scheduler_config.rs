//! [`SchedulerConfig`]: the scheduler's limits and KV-cache geometry.

/// [`SchedulerConfig::max_preemptions`]'s default.
pub const DEFAULT_MAX_PREEMPTIONS: u32 = 3;

/// Scheduling limits and KV-cache geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Most requests running at once.
    pub max_num_seqs: usize,
    /// Token budget of one step.
    pub max_num_batched_tokens: usize,
    /// Token slots per KV block.
    pub block_size: usize,
    /// KV blocks in the pool (the model side derives it from its memory budget).
    pub num_kv_blocks: usize,
    /// Share full KV blocks between requests with equal prefixes.
    pub enable_prefix_caching: bool,
    /// Split prompts longer than the remaining budget across steps.
    pub enable_chunked_prefill: bool,
    /// Most prompt tokens one request may compute per step, leaving budget for others.
    pub long_prefill_threshold: Option<usize>,
    /// Context limit of the model (prompt plus output); further clamped to what the KV pool
    /// holds, unless the attention window bounds a sequence's blocks.
    pub max_model_len: Option<usize>,
    /// The attention window that bounds every layer of the model, in tokens (`None` if any
    /// layer attends to the whole context): blocks outside it are released while a request
    /// runs.
    pub attention_window: Option<usize>,
    /// Most distinct LoRA adapters among running requests (`None`: no limit). A waiting request
    /// whose adapter would exceed it is deferred; see [`super::Scheduler::schedule`].
    pub max_loras: Option<usize>,
    /// Starvation guard: a request preempted this many times is no longer a victim for a
    /// more urgent waiting request, and is preempted for KV space only when every other
    /// running request is protected too (`None`: no guard).
    pub max_preemptions: Option<u32>,
    /// Most tokens one prompt may compute in a step while other requests wait for their first
    /// token (queued, or running with an unfinished prompt); `None`: no cap beyond
    /// `long_prefill_threshold`. Needs chunked prefill to split the prompt.
    pub contended_prefill_chunk: Option<usize>,
}

impl SchedulerConfig {
    /// Defaults (256 sequences, 2048 tokens per step, 16-token blocks, prefix caching and
    /// chunked prefill on) over `num_kv_blocks` blocks.
    pub fn new(num_kv_blocks: usize) -> Self {
        SchedulerConfig {
            max_num_seqs: 256,
            max_num_batched_tokens: 2048,
            block_size: 16,
            num_kv_blocks,
            enable_prefix_caching: true,
            enable_chunked_prefill: true,
            long_prefill_threshold: None,
            max_model_len: None,
            attention_window: None,
            max_loras: None,
            max_preemptions: Some(DEFAULT_MAX_PREEMPTIONS),
            contended_prefill_chunk: None,
        }
    }
}
