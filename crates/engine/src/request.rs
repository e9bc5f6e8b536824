//! [`Request`]: one generation request, the single entry the engine keeps for it. It owns
//! its tokens and progress, its block table, its [`Generation`] (sampler, detokenizer,
//! stop strings, event channel and timestamps) and its [`SpecState`] (speculative decoding);
//! the scheduler holds every live request in one map, and nothing else keeps per-request
//! state.
//!
//! Following the vLLM v1 rule, a request has no prefill or decode phase: it has `num_tokens`
//! (prompt plus generated tokens) and `num_computed_tokens` (tokens whose K/V sit in the cache),
//! and every step schedules tokens so the second catches up with the first.
//!
//! ```text
//! tokens:   | prompt .................. | output ...... |
//!           0          num_computed ^              num_tokens ^
//!                      (KV cached)   \__ scheduled next __/
//! ```

mod generation;

use std::fmt;

use tokio::sync::mpsc::UnboundedSender;

pub use generation::Generation;

use crate::adapter_id::AdapterId;
use crate::api::{EngineEvent, EngineRequest};
use crate::kv::{BlockHash, BlockId};
use crate::speculative::SpecState;

/// Engine-wide request identifier.
pub type RequestId = u64;

/// Why a request stopped generating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FinishReason {
    /// An end-of-sequence or stop token was sampled.
    Stop,
    /// `max_tokens` was reached, or the sequence filled the model's context.
    Length,
    /// The client went away or the server gave up on the request.
    Abort,
    /// The engine failed the request (its typed cause went out in
    /// [`crate::api::EngineEvent::Failed`]); never the reason of a `Finished` event.
    Error,
}

impl FinishReason {
    /// The OpenAI-style `finish_reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestStatus {
    /// Queued, never scheduled.
    Waiting,
    /// Holds KV blocks and is scheduled each step.
    Running,
    /// Lost its blocks under memory pressure; waits to be recomputed.
    Preempted,
    /// Done; its blocks are released.
    Finished(FinishReason),
}

/// The per-request settings the scheduler needs; the engine core fills them from the validated
/// sampling parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestParams {
    /// Most tokens to generate (at least 1).
    pub max_tokens: usize,
    /// End-of-sequence and stop tokens are ignored until this many tokens were generated.
    pub min_tokens: usize,
    /// Lower runs first (vLLM's convention; default 0); ties go to the earlier arrival.
    pub priority: i32,
    /// The model's end-of-sequence token ids.
    pub eos_token_ids: Vec<u32>,
    /// Extra token ids that end generation.
    pub stop_token_ids: Vec<u32>,
    /// Keep generating past end-of-sequence tokens (stop tokens still apply).
    pub ignore_eos: bool,
    /// Prefix-cache namespace (model, LoRA adapter or cache salt); blocks are shared only
    /// between requests with the same key.
    pub cache_key: Option<u64>,
    /// The LoRA adapter the request runs with (`None`: the base model alone). Part of the
    /// prefix-cache key: two adapters never share KV blocks.
    pub adapter: Option<AdapterId>,
    /// Mixed into the hash of the first KV block, so only requests with the same salt share
    /// cached prefixes (see [`crate::kv::block_hash`]).
    pub cache_salt: Option<std::sync::Arc<str>>,
}

impl RequestParams {
    /// Parameters generating at most `max_tokens`, priority 0, no stop tokens.
    pub fn new(max_tokens: usize) -> Self {
        RequestParams {
            max_tokens,
            min_tokens: 0,
            priority: 0,
            eos_token_ids: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            cache_key: None,
            adapter: None,
            cache_salt: None,
        }
    }

    /// The prefix-cache namespace of the request: its cache key, and its adapter if it has one
    /// (see [`crate::kv::block_hash`]).
    pub fn prefix_key(&self) -> Option<u64> {
        prefix_key(self.cache_key, self.adapter)
    }
}

/// The prefix-cache namespace of a request with `cache_key` running `adapter`: the extra key
/// of its block hashes (see [`crate::kv::block_hash`]). The one definition, shared by the
/// engine and by a router that predicts the engine's hashes
/// ([`EngineRequest::prompt_block_hashes`]).
pub fn prefix_key(cache_key: Option<u64>, adapter: Option<AdapterId>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let Some(adapter) = adapter else {
        return cache_key;
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ("kestrel-lora", cache_key, adapter.0).hash(&mut h);
    Some(h.finish())
}

/// The cache key of every request the engine builds from an [`EngineRequest`].
pub(crate) const ENGINE_CACHE_KEY: Option<u64> = None;

/// A request's KV blocks: its block table and how many leading blocks are registered in the
/// prefix cache. Managed by [`crate::kv::KvCacheManager`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestBlocks {
    /// Physical block ids, in logical order.
    pub(crate) table: Vec<BlockId>,
    /// Leading blocks already registered in the prefix cache (or found there).
    pub(crate) num_cached: usize,
    /// Leading entries released because they fell out of the attention window
    /// ([`crate::kv::NO_BLOCK`] holes).
    pub(crate) num_released: usize,
}

/// A generation request: its tokens, progress, status, blocks and generation state.
#[derive(Debug)]
pub struct Request {
    id: RequestId,
    tokens: Vec<u32>,
    num_prompt_tokens: usize,
    num_computed_tokens: usize,
    params: RequestParams,
    arrival_seq: u64,
    status: RequestStatus,
    num_preemptions: u32,
    block_hashes: Vec<BlockHash>,
    blocks: RequestBlocks,
    generation: Generation,
    /// Speculative-decoding state: draft slots, draft length, proposer bookkeeping.
    spec: SpecState,
    /// Whether blocks of its prompt are being read back from the KV disk tier (it is not
    /// admitted until they are in the prefix cache or the read gave up).
    loading_from_disk: bool,
    /// Whether the KV disk tier was asked about its prompt already.
    disk_checked: bool,
}

impl Request {
    /// A waiting request for `prompt` that samples greedily and reports to no one (arrival
    /// order is set when the scheduler accepts it): what scheduler-level code and tests need.
    pub fn new(id: RequestId, prompt: Vec<u32>, params: RequestParams) -> Self {
        let generation = Generation::detached(&prompt);
        Self::with_generation(id, prompt, params, generation)
    }

    /// The engine's entry for `req`, reporting to `events`; `eos_token_ids` end it unless the
    /// request ignores them.
    pub fn from_engine(
        id: RequestId,
        req: EngineRequest,
        eos_token_ids: &[u32],
        events: UnboundedSender<EngineEvent>,
    ) -> Self {
        let eos: &[u32] = if req.sampling().ignore_eos {
            &[]
        } else {
            eos_token_ids
        };
        let generation = Generation::new(&req, eos, events);
        let params = RequestParams {
            max_tokens: req.sampling().max_tokens,
            min_tokens: req.sampling().min_tokens,
            priority: req.priority(),
            eos_token_ids: if req.sampling().ignore_eos {
                Vec::new()
            } else {
                eos_token_ids.to_vec()
            },
            stop_token_ids: req.sampling().stop_token_ids.clone(),
            ignore_eos: req.sampling().ignore_eos,
            cache_key: ENGINE_CACHE_KEY,
            adapter: req.adapter(),
            cache_salt: req.cache_salt().map(std::sync::Arc::from),
        };
        let (prompt, _) = req.into_parts();
        Self::with_generation(id, prompt, params, generation)
    }

    fn with_generation(
        id: RequestId,
        prompt: Vec<u32>,
        params: RequestParams,
        generation: Generation,
    ) -> Self {
        Request {
            id,
            num_prompt_tokens: prompt.len(),
            tokens: prompt,
            num_computed_tokens: 0,
            params,
            arrival_seq: 0,
            status: RequestStatus::Waiting,
            num_preemptions: 0,
            block_hashes: Vec::new(),
            blocks: RequestBlocks::default(),
            generation,
            spec: SpecState::default(),
            loading_from_disk: false,
            disk_checked: false,
        }
    }

    /// Whether its prompt's blocks are being read back from the KV disk tier.
    pub fn loading_from_disk(&self) -> bool {
        self.loading_from_disk
    }

    /// Whether the KV disk tier was asked about its prompt already.
    pub fn disk_checked(&self) -> bool {
        self.disk_checked
    }

    /// Marks the disk tier as asked, and whether reads for it are under way.
    pub fn set_disk_lookup(&mut self, loading: bool) {
        self.disk_checked = true;
        self.loading_from_disk = loading;
    }

    /// The request id.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// Prompt followed by generated tokens.
    pub fn all_token_ids(&self) -> &[u32] {
        &self.tokens
    }

    /// The prompt tokens.
    pub fn prompt_token_ids(&self) -> &[u32] {
        &self.tokens[..self.num_prompt_tokens]
    }

    /// The generated tokens.
    pub fn output_token_ids(&self) -> &[u32] {
        &self.tokens[self.num_prompt_tokens..]
    }

    /// Prompt plus generated tokens.
    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Tokens whose K/V are in the cache.
    pub fn num_computed_tokens(&self) -> usize {
        self.num_computed_tokens
    }

    /// The request's parameters.
    pub fn params(&self) -> &RequestParams {
        &self.params
    }

    /// Scheduling priority (lower runs first).
    pub fn priority(&self) -> i32 {
        self.params.priority
    }

    /// Position in arrival order (set by the scheduler).
    pub fn arrival_seq(&self) -> u64 {
        self.arrival_seq
    }

    /// Current status.
    pub fn status(&self) -> RequestStatus {
        self.status
    }

    /// How many times the request lost its blocks to preemption.
    pub fn num_preemptions(&self) -> u32 {
        self.num_preemptions
    }

    /// The block table: physical KV block ids in logical order (empty when it holds none);
    /// entries released out of a sliding window read [`crate::kv::NO_BLOCK`].
    pub fn block_table(&self) -> &[BlockId] {
        &self.blocks.table
    }

    /// Blocks the request holds now: its table less the entries released out of the
    /// attention window.
    pub fn num_held_blocks(&self) -> usize {
        self.blocks.table.len() - self.blocks.num_released
    }

    /// Slots of its held blocks past its computed tokens (the partly-filled last block, and
    /// blocks reserved ahead).
    pub fn unused_held_slots(&self, block_size: usize) -> usize {
        let stored = self
            .num_computed_tokens
            .saturating_sub(self.blocks.num_released * block_size);
        (self.num_held_blocks() * block_size).saturating_sub(stored)
    }

    /// The sampler, detokenizer and event channel.
    pub fn generation(&self) -> &Generation {
        &self.generation
    }

    /// Mutable access to the generation state together with the token history it samples from.
    pub fn generation_mut(&mut self) -> (&mut Generation, &[u32]) {
        (&mut self.generation, &self.tokens)
    }

    /// Hashes of the full blocks hashed so far (see [`crate::kv::block_hash`]).
    pub fn block_hashes(&self) -> &[BlockHash] {
        &self.block_hashes
    }

    /// Sets the count of computed tokens, clamped to `num_tokens`.
    pub fn set_num_computed_tokens(&mut self, n: usize) {
        debug_assert!(
            n <= self.tokens.len(),
            "{n} computed of {} tokens",
            self.tokens.len()
        );
        self.num_computed_tokens = n.min(self.tokens.len());
    }

    /// Appends one generated token.
    pub fn append_output_token(&mut self, token: u32) {
        self.tokens.push(token);
    }

    /// The token-level stop rule: why the request must stop after its last generated token, if
    /// it must (the stop sets, then `max_tokens`, then the context limit `max_model_len`). The
    /// engine combines it with stop strings in one place before finishing a request.
    pub fn check_stop(&self, max_model_len: usize) -> Option<FinishReason> {
        let out = self.output_token_ids();
        let last = *out.last()?;
        if out.len() > self.params.min_tokens {
            let eos = !self.params.ignore_eos && self.params.eos_token_ids.contains(&last);
            if eos || self.params.stop_token_ids.contains(&last) {
                return Some(FinishReason::Stop);
            }
        }
        if out.len() >= self.params.max_tokens || self.tokens.len() >= max_model_len {
            return Some(FinishReason::Length);
        }
        None
    }

    /// Draft-token slots to schedule after the last token when only that token is uncomputed
    /// (0: an ordinary decode step).
    pub fn spec_lookahead(&self) -> usize {
        self.spec.lookahead()
    }

    /// Sets the draft-token slots of the next step (see [`Self::spec_lookahead`]).
    pub fn set_spec_lookahead(&mut self, k: usize) {
        self.spec.set_lookahead(k);
    }

    /// The request's speculative-decoding state.
    pub fn spec_state(&self) -> &SpecState {
        &self.spec
    }

    pub(crate) fn spec_state_mut(&mut self) -> &mut SpecState {
        &mut self.spec
    }

    /// The tokens (prompt and output) beside the speculation state, for a proposer.
    pub(crate) fn spec_parts_mut(&mut self) -> (&[u32], &mut SpecState) {
        (&self.tokens, &mut self.spec)
    }

    pub(crate) fn set_arrival_seq(&mut self, seq: u64) {
        self.arrival_seq = seq;
    }

    pub(crate) fn set_status(&mut self, status: RequestStatus) {
        self.status = status;
    }

    /// Drops all progress after a preemption: the KV cache must be recomputed.
    pub(crate) fn mark_preempted(&mut self) {
        self.num_computed_tokens = 0;
        self.spec.set_lookahead(0);
        self.num_preemptions += 1;
        self.status = RequestStatus::Preempted;
    }

    pub(crate) fn block_hashes_mut(&mut self) -> (&[u32], &mut Vec<BlockHash>) {
        (&self.tokens, &mut self.block_hashes)
    }

    pub(crate) fn blocks(&self) -> &RequestBlocks {
        &self.blocks
    }

    pub(crate) fn blocks_mut(&mut self) -> &mut RequestBlocks {
        &mut self.blocks
    }

    /// The generation state, for the request's final event (after the scheduler released it).
    pub(crate) fn into_generation(self) -> Generation {
        self.generation
    }

    /// Hands the block table over (to be freed), leaving the request without blocks.
    pub(crate) fn take_blocks(&mut self) -> RequestBlocks {
        std::mem::take(&mut self.blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_conditions() {
        let mut p = RequestParams::new(3);
        p.eos_token_ids = vec![2];
        p.stop_token_ids = vec![9];
        p.min_tokens = 1;
        let mut r = Request::new(1, vec![5, 6], p);
        assert_eq!(r.check_stop(100), None);
        r.append_output_token(2);
        assert_eq!(r.check_stop(100), None, "eos ignored before min_tokens");
        r.append_output_token(9);
        assert_eq!(r.check_stop(100), Some(FinishReason::Stop));
        let mut r2 = Request::new(2, vec![5], RequestParams::new(2));
        r2.append_output_token(2);
        assert_eq!(r2.check_stop(100), None);
        assert_eq!(r2.check_stop(2), Some(FinishReason::Length));
        r2.append_output_token(3);
        assert_eq!(r2.check_stop(100), Some(FinishReason::Length));
        assert_eq!(r2.output_token_ids(), &[2, 3]);
        assert_eq!(r2.prompt_token_ids(), &[5]);
    }
}
