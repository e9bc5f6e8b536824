//! The continuous-batching [`Scheduler`].
//!
//! One step is `schedule -> execute -> update`. [`Scheduler::schedule`] hands out a token
//! budget (`max_num_batched_tokens`) so every request's `num_computed_tokens` catches up with its
//! `num_tokens`; there is no prefill or decode mode:
//!
//! 1. Running requests first, in admission order: a decode step needs one token, an unfinished
//!    (chunked) prefill takes what the budget allows. If the KV pool is full, the running
//!    request with the lowest priority, latest arrival is preempted (blocks freed, progress
//!    reset, back to the front of its priority class) until the allocation fits — possibly the
//!    requester itself.
//! 2. If nothing was preempted, waiting requests are admitted in queue order (lower priority
//!    value first, as in vLLM, then FIFO) while budget, `max_num_seqs` and KV blocks allow, starting from their
//!    cached prefix. A waiting request may preempt running requests of strictly lower priority,
//!    never equal or higher ones; otherwise admission stops at the first request that does not
//!    fit.
//!
//! [`Scheduler::update`] then advances the computed counts, registers newly full blocks in the
//! prefix cache, appends sampled tokens and reports each request's token-level stop reason (a
//! stop token, `max_tokens` or the context limit). It ends nothing itself: the engine decides
//! how a request ends and calls [`Scheduler::finish`] (or [`Scheduler::abort`] when the client
//! or the server gave up), which remove the request and free its blocks.
//!
//! Who waits, who is preempted and whose admission is deferred (LoRA: the running requests use
//! at most `max_loras` distinct adapters) is the [`SchedulingPolicy`]'s decision; the engine's
//! is [`PriorityFcfs`], whose docs give the rules.
//!
//! Liveness: the context limit is clamped to the KV pool (and, without chunked prefill, to the
//! token budget), so a request running alone always fits; victims keep their arrival order, so
//! a preempted request becomes the oldest of its class and is not chosen again while newer
//! requests of its priority run.
//!
//! Sliding windows: when every layer of the model has a window (`attention_window`), `update`
//! releases each sequence's blocks that fell out of the window, so a sequence holds at most
//! [`AttentionWindow::max_live_blocks`] of its chunk. With chunked prefill on, chunks are then
//! capped so that bound fits the pool and the context limit is *not* clamped to the pool: a
//! request alone always fits whatever its length.

mod backlog;
pub mod output;
pub mod policy;
pub mod queue;
mod scheduler_config;
mod scheduler_error;

use std::collections::{HashMap, HashSet};

pub use output::{RequestOutput, SchedulerOutput};
pub use policy::{AdmissionState, PriorityFcfs, SchedulingPolicy};
pub use queue::WaitingQueue;
pub use scheduler_config::{SchedulerConfig, DEFAULT_MAX_PREEMPTIONS};
pub use scheduler_error::SchedulerError;

use crate::adapter_id::AdapterId;
use crate::executor::{BatchInput, SeqBatch};
use crate::kv::{AttentionWindow, ComputedBlocks, KvCacheConfig, KvCacheManager, PrefixCacheStats};
use crate::request::{FinishReason, Request, RequestId, RequestStatus};

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SchedulerStats {
    /// Requests holding KV blocks.
    pub num_running: usize,
    /// Requests queued (new or preempted).
    pub num_waiting: usize,
    /// Fraction of KV blocks in use.
    pub kv_usage: f64,
    /// Preemptions since start.
    pub num_preemptions: u64,
    /// Prefix-cache queries and hits, in tokens.
    pub prefix_cache: PrefixCacheStats,
    /// KV blocks released out of the attention window since start.
    pub window_blocks_freed: u64,
    /// KV blocks no request holds.
    pub kv_free_blocks: usize,
    /// Fraction of occupied KV slots no running sequence reads (see
    /// [`crate::kv::KvFragmentation`]).
    pub kv_fragmentation: f64,
}

/// The step being built: remaining budget, who runs how many tokens, who was preempted.
struct Step {
    budget: usize,
    scheduled: Vec<(RequestId, usize)>,
    preempted: Vec<RequestId>,
}

impl Step {
    fn push(&mut self, id: RequestId, n: usize) {
        self.budget -= n;
        self.scheduled.push((id, n));
    }

    fn unschedule(&mut self, id: RequestId) {
        if let Some(pos) = self.scheduled.iter().position(|&(r, _)| r == id) {
            let (_, n) = self.scheduled.remove(pos);
            self.budget += n;
        }
    }
}

/// Owns every live request (the engine's one map of them), the waiting queue, the running list
/// and the KV manager.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    kv: KvCacheManager,
    requests: HashMap<RequestId, Request>,
    waiting: WaitingQueue,
    running: Vec<RequestId>,
    next_arrival: u64,
    max_model_len: usize,
    /// Longest chunk a windowed sequence may compute in one step (its blocks then fit the
    /// pool); `usize::MAX` without a window.
    max_chunk: usize,
    num_preemptions: u64,
    /// Queue order, victim choice and admission deferral.
    policy: Box<dyn SchedulingPolicy>,
}

impl Scheduler {
    /// A scheduler with an empty KV pool of `config.num_kv_blocks` blocks, under the
    /// [`PriorityFcfs`] policy.
    pub fn new(config: SchedulerConfig) -> Result<Self, SchedulerError> {
        let policy = PriorityFcfs::new(config.max_preemptions);
        Self::with_policy(config, Box::new(policy))
    }

    /// A scheduler like [`Scheduler::new`] under `policy`.
    pub fn with_policy(
        config: SchedulerConfig,
        policy: Box<dyn SchedulingPolicy>,
    ) -> Result<Self, SchedulerError> {
        if config.max_num_seqs == 0 {
            return Err(SchedulerError::InvalidConfig(
                "max_num_seqs must be at least 1",
            ));
        }
        if config.max_num_batched_tokens == 0 {
            return Err(SchedulerError::InvalidConfig(
                "max_num_batched_tokens must be at least 1",
            ));
        }
        if config.contended_prefill_chunk == Some(0) {
            return Err(SchedulerError::InvalidConfig(
                "contended_prefill_chunk must be at least 1",
            ));
        }
        if config.long_prefill_threshold == Some(0) {
            return Err(SchedulerError::InvalidConfig(
                "long_prefill_threshold must be at least 1",
            ));
        }
        let kv = KvCacheManager::new(KvCacheConfig {
            num_blocks: config.num_kv_blocks,
            block_size: config.block_size,
            enable_prefix_caching: config.enable_prefix_caching,
            attention_window: config.attention_window,
        })?;
        let window_chunk = window_chunk_limit(&config, kv.attention_window());
        let mut max_model_len = config.max_model_len.unwrap_or(usize::MAX);
        if window_chunk.is_none() {
            max_model_len = max_model_len.min(config.num_kv_blocks * config.block_size);
        }
        if !config.enable_chunked_prefill {
            max_model_len = max_model_len.min(config.max_num_batched_tokens);
        }
        if max_model_len < 2 {
            return Err(SchedulerError::InvalidConfig(
                "context limit leaves no room to generate",
            ));
        }
        Ok(Scheduler {
            config,
            kv,
            requests: HashMap::new(),
            waiting: WaitingQueue::new(),
            running: Vec::new(),
            next_arrival: 0,
            max_model_len,
            max_chunk: window_chunk.unwrap_or(usize::MAX),
            num_preemptions: 0,
            policy,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Effective context limit: prompt plus output tokens never exceed it.
    pub fn max_model_len(&self) -> usize {
        self.max_model_len
    }

    /// The KV-cache manager (block tables, pool state), for inspection.
    pub fn kv(&self) -> &KvCacheManager {
        &self.kv
    }

    /// The KV-cache manager, for a lower tier that logs and adopts prefix-cache blocks
    /// (block tables stay the scheduler's).
    pub(crate) fn kv_mut(&mut self) -> &mut KvCacheManager {
        &mut self.kv
    }

    /// The hashes of waiting request `id`'s prompt blocks past its prefix-cache hit (see
    /// [`KvCacheManager::blocks_past_hit`]); empty for an unknown id.
    pub(crate) fn blocks_past_hit(&mut self, id: RequestId) -> Vec<crate::kv::BlockHash> {
        match self.requests.get_mut(&id) {
            Some(req) => self.kv.blocks_past_hit(req),
            None => Vec::new(),
        }
    }

    /// Lends fresh KV blocks for `num_tokens` tokens to `f` and frees them after it (see
    /// [`KvCacheManager::with_scratch_blocks`]).
    pub fn with_scratch_blocks<T>(
        &mut self,
        num_tokens: usize,
        f: impl FnOnce(&[crate::kv::BlockId]) -> T,
    ) -> Option<T> {
        self.kv.with_scratch_blocks(num_tokens, f)
    }

    /// A live (waiting or running) request.
    pub fn request(&self, id: RequestId) -> Option<&Request> {
        self.requests.get(&id)
    }

    /// A live request, mutably (its generation state; scheduling state stays the scheduler's).
    pub fn request_mut(&mut self, id: RequestId) -> Option<&mut Request> {
        self.requests.get_mut(&id)
    }

    /// Ids of every live request.
    pub fn request_ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.requests.keys().copied()
    }

    /// Running request ids in scheduling order.
    pub fn running_ids(&self) -> &[RequestId] {
        &self.running
    }

    /// Waiting request ids in admission order.
    pub fn waiting_ids(&self) -> Vec<RequestId> {
        self.waiting.iter().collect()
    }

    /// Whether any request is waiting or running.
    pub fn has_unfinished(&self) -> bool {
        !self.requests.is_empty()
    }

    /// Live (running and waiting) requests per LoRA adapter.
    pub fn adapter_uses(&self) -> HashMap<AdapterId, usize> {
        let mut uses = HashMap::new();
        for a in self.requests.values().filter_map(|r| r.params().adapter) {
            *uses.entry(a).or_insert(0) += 1;
        }
        uses
    }

    /// The distinct adapters of the running requests.
    pub fn running_adapters(&self) -> HashSet<AdapterId> {
        self.running
            .iter()
            .filter_map(|id| self.requests.get(id)?.params().adapter)
            .collect()
    }

    /// While no request is alive: checks that the KV cache holds no block and that the block
    /// pool's invariants hold. Requests alive make the check meaningless, so it passes.
    pub fn check_idle(&self) -> Result<(), crate::kv::KvLeak> {
        if self.has_unfinished() {
            return Ok(());
        }
        self.kv.check_idle()
    }

    /// Current counters.
    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            num_running: self.running.len(),
            num_waiting: self.waiting.len(),
            kv_usage: self.kv.usage(),
            num_preemptions: self.num_preemptions,
            prefix_cache: self.kv.stats(),
            window_blocks_freed: self.kv.window_blocks_freed(),
            kv_free_blocks: self.kv.num_free_blocks(),
            kv_fragmentation: self.kv.fragmentation(self.tail_slots()).fraction(),
        }
    }

    /// Slots running sequences hold past their computed tokens (partly-filled last blocks and
    /// blocks reserved ahead).
    fn tail_slots(&self) -> usize {
        let bs = self.kv.block_size();
        self.running
            .iter()
            .filter_map(|id| self.requests.get(id))
            .map(|r| r.unused_held_slots(bs))
            .sum()
    }

    /// Queues a new request behind earlier ones of the same priority.
    pub fn add_request(&mut self, mut req: Request) -> Result<(), SchedulerError> {
        let id = req.id();
        if self.requests.contains_key(&id) {
            return Err(SchedulerError::DuplicateRequest(id));
        }
        if req.num_tokens() == 0 {
            return Err(SchedulerError::EmptyPrompt(id));
        }
        if req.params().max_tokens == 0 {
            return Err(SchedulerError::ZeroMaxTokens(id));
        }
        if req.num_tokens() >= self.max_model_len {
            let max = self.max_model_len - 1;
            return Err(SchedulerError::PromptTooLong {
                id,
                len: req.num_tokens(),
                max,
            });
        }
        req.set_arrival_seq(self.next_arrival);
        req.set_status(RequestStatus::Waiting);
        req.set_num_computed_tokens(0);
        self.next_arrival += 1;
        self.waiting.push_back(id, self.policy.queue_class(&req));
        self.requests.insert(id, req);
        Ok(())
    }

    /// Ends request `id` with `reason`: removes it, waiting or running, and frees its blocks.
    /// Returns the request (for its final event), or `None` if it is unknown.
    pub fn finish(&mut self, id: RequestId, reason: FinishReason) -> Option<Request> {
        let mut req = self.requests.remove(&id)?;
        self.waiting.remove(id);
        if req.status() == RequestStatus::Running {
            self.running.retain(|&r| r != id);
        }
        self.kv.free(&mut req);
        req.set_status(RequestStatus::Finished(reason));
        Some(req)
    }

    /// Cancels request `id` because its client went away or the server gave up:
    /// [`Scheduler::finish`] with [`FinishReason::Abort`].
    pub fn abort(&mut self, id: RequestId) -> Option<Request> {
        self.finish(id, FinishReason::Abort)
    }

    /// Decides the next step: which requests run and how many tokens each.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let mut step = Step {
            budget: self.config.max_num_batched_tokens,
            scheduled: Vec::new(),
            preempted: Vec::new(),
        };
        self.schedule_running(&mut step);
        if step.preempted.is_empty() {
            self.schedule_waiting(&mut step);
        }
        self.build_output(step)
    }

    /// Applies a finished step: `sampled` holds one token per sequence of `out` with logits
    /// rows, in batch order. Returns the new tokens with their token-level stop reasons;
    /// requests ended since `schedule` are skipped.
    pub fn update(
        &mut self,
        out: &SchedulerOutput,
        sampled: &[u32],
    ) -> Result<Vec<RequestOutput>, SchedulerError> {
        let expected = out.sampling_seqs().count();
        if expected != sampled.len() {
            return Err(SchedulerError::SampledCountMismatch {
                expected,
                got: sampled.len(),
            });
        }
        let mut outputs = Vec::new();
        let mut tokens = sampled.chunks(1);
        for seq in &out.batch.seqs {
            let emitted = if seq.num_logits > 0 {
                tokens.next()
            } else {
                None
            };
            self.apply_seq(seq, emitted.unwrap_or(&[]), &mut outputs);
        }
        Ok(outputs)
    }

    /// [`Scheduler::update`] for a step that verified draft tokens: `counts[i]` tokens of
    /// `tokens` belong to the `i`-th sequence with logits rows (between 1 and its rows: the
    /// accepted draft tokens, then one token sampled after them). Positions of rejected drafts
    /// are un-computed again (their KV slots are overwritten later), and blocks past the new
    /// tokens are freed.
    pub fn update_emitted(
        &mut self,
        out: &SchedulerOutput,
        tokens: &[u32],
        counts: &[usize],
    ) -> Result<Vec<RequestOutput>, SchedulerError> {
        let expected = out.sampling_seqs().count();
        if expected != counts.len() || counts.iter().sum::<usize>() != tokens.len() {
            return Err(SchedulerError::SampledCountMismatch {
                expected,
                got: counts.len(),
            });
        }
        for (seq, &c) in out.sampling_seqs().zip(counts) {
            if c == 0 || c > seq.num_logits {
                return Err(SchedulerError::EmittedCountMismatch {
                    id: seq.request_id,
                    emitted: c,
                    rows: seq.num_logits,
                });
            }
        }
        let mut outputs = Vec::new();
        let (mut rest, mut counts) = (tokens, counts.iter());
        for seq in &out.batch.seqs {
            let mut emitted: &[u32] = &[];
            if seq.num_logits > 0 {
                let c = counts.next().copied().unwrap_or(0);
                (emitted, rest) = rest.split_at(c.min(rest.len()));
            }
            self.apply_seq(seq, emitted, &mut outputs);
        }
        Ok(outputs)
    }

    /// Advances one sequence: its real tokens and the accepted prefix of its draft tokens
    /// become computed, and `emitted` is appended token by token until a stop.
    fn apply_seq(&mut self, seq: &SeqBatch, emitted: &[u32], outputs: &mut Vec<RequestOutput>) {
        let Some(req) = self.requests.get_mut(&seq.request_id) else {
            return;
        };
        if req.status() != RequestStatus::Running || req.num_computed_tokens() != seq.start_pos {
            return;
        }
        let drafts = &seq.tokens[seq.tokens.len() - seq.num_logits.saturating_sub(1)..];
        let real = seq.tokens.len() - drafts.len();
        let accepted = emitted
            .iter()
            .zip(drafts)
            .take(emitted.len().saturating_sub(1))
            .take_while(|(e, d)| e == d)
            .count();
        for &token in &emitted[..emitted.len().min(accepted + 1)] {
            req.append_output_token(token);
            let stop = req.check_stop(self.max_model_len);
            outputs.push(RequestOutput {
                request_id: seq.request_id,
                token,
                stop,
            });
            if stop.is_some() {
                break;
            }
        }
        let computed = (seq.start_pos + real + accepted).min(req.num_tokens());
        req.set_num_computed_tokens(computed);
        self.kv.cache_computed_blocks(req);
        self.kv.free_outside_window(req);
        if !drafts.is_empty() {
            self.kv.free_tail(req);
        }
    }

    /// Tokens to give a request with `remaining` uncomputed tokens; 0 if it cannot run now.
    /// `contended`: other requests wait for their first token, so a prompt's chunk is capped at
    /// `contended_prefill_chunk`.
    fn chunk_len(&self, remaining: usize, budget: usize, contended: bool) -> usize {
        let fair = match self.config.contended_prefill_chunk {
            Some(c) if contended && self.config.enable_chunked_prefill => c,
            _ => usize::MAX,
        };
        let n = self
            .config
            .long_prefill_threshold
            .map_or(remaining, |t| remaining.min(t))
            .min(self.max_chunk)
            .min(fair);
        if n <= budget {
            n
        } else if self.config.enable_chunked_prefill {
            budget
        } else {
            0
        }
    }

    fn schedule_running(&mut self, step: &mut Step) {
        let order = self.running.clone();
        for id in order {
            if step.budget == 0 {
                break;
            }
            let Some(req) = self.requests.get(&id) else {
                continue;
            };
            if req.status() != RequestStatus::Running {
                continue; // preempted earlier in this step
            }
            let mut remaining = req.num_tokens() - req.num_computed_tokens();
            if remaining == 1 {
                remaining += req.spec_lookahead();
            }
            let contended = self.others_await_first_token(id);
            let n = self.chunk_len(remaining, step.budget, contended);
            if n > 0 && self.allocate_running(id, n, step) {
                step.push(id, n);
            }
        }
    }

    /// Allocates `n` new slots for running request `id`, preempting victims as needed; false if
    /// `id` itself was preempted.
    fn allocate_running(&mut self, id: RequestId, n: usize, step: &mut Step) -> bool {
        loop {
            let Some(req) = self.requests.get_mut(&id) else {
                return false;
            };
            if self
                .kv
                .allocate_slots(req, n, &ComputedBlocks::default())
                .is_some()
            {
                return true;
            }
            let Some(victim) = self.pick_victim(None) else {
                return false;
            };
            self.preempt(victim, step);
            if victim == id {
                return false;
            }
        }
    }

    fn schedule_waiting(&mut self, step: &mut Step) {
        let max_loras = self.config.max_loras.unwrap_or(usize::MAX);
        let mut admission = AdmissionState::new(self.running_adapters(), max_loras);
        let queue: Vec<RequestId> = self.waiting.iter().collect();
        for id in queue {
            if step.budget == 0 || self.running.len() >= self.config.max_num_seqs {
                break;
            }
            let Some(req) = self.requests.get_mut(&id) else {
                self.waiting.remove(id);
                continue;
            };
            // Its cached prefix is still being read back from disk: admit it once it is.
            if req.loading_from_disk() {
                continue;
            }
            if self.policy.defer_admission(req, &admission) {
                admission.deferred(req);
                continue;
            }
            let computed = self.kv.get_computed_blocks(req);
            let remaining = req.num_tokens() - computed.num_tokens;
            let contended = self.others_await_first_token(id);
            let n = self.chunk_len(remaining, step.budget, contended);
            if n == 0 || !self.allocate_waiting(id, n, &computed, step) {
                break;
            }
            self.waiting.remove(id);
            if let Some(req) = self.requests.get_mut(&id) {
                req.set_num_computed_tokens(computed.num_tokens);
                req.set_status(RequestStatus::Running);
                admission.admitted(req);
            }
            self.running.push(id);
            step.push(id, n);
        }
    }

    /// Allocates blocks to admit waiting request `id`, preempting only running requests of
    /// strictly lower priority (a larger priority value); false if it does not fit.
    fn allocate_waiting(
        &mut self,
        id: RequestId,
        n: usize,
        computed: &ComputedBlocks,
        step: &mut Step,
    ) -> bool {
        loop {
            let Some(req) = self.requests.get_mut(&id) else {
                return false;
            };
            if self.kv.allocate_slots(req, n, computed).is_some() {
                return true;
            }
            let Some(victim) = self.pick_victim(Some(id)) else {
                return false;
            };
            self.preempt(victim, step);
        }
    }

    /// Whether a request other than `id` is queued or still computing its prompt.
    fn others_await_first_token(&self, id: RequestId) -> bool {
        self.waiting.iter().any(|w| w != id)
            || self.running.iter().any(|&r| {
                r != id
                    && self
                        .requests
                        .get(&r)
                        .is_some_and(|q| q.output_token_ids().is_empty())
            })
    }

    /// The running request to preempt, as the policy chooses it: for KV space, or to admit
    /// waiting request `admitting`.
    fn pick_victim(&self, admitting: Option<RequestId>) -> Option<RequestId> {
        let running: Vec<&Request> = self
            .running
            .iter()
            .filter_map(|id| self.requests.get(id))
            .collect();
        let admitting = admitting.and_then(|id| self.requests.get(&id));
        self.policy.pick_victim(&running, admitting)
    }

    fn preempt(&mut self, victim: RequestId, step: &mut Step) {
        self.running.retain(|&r| r != victim);
        if let Some(req) = self.requests.get_mut(&victim) {
            self.kv.free(req);
            req.mark_preempted();
            self.waiting
                .push_front(victim, self.policy.queue_class(req));
        }
        step.unschedule(victim);
        step.preempted.push(victim);
        self.num_preemptions += 1;
    }

    /// The step's batch. Slots scheduled past a request's last token are lookahead slots for
    /// draft tokens: the batch holds only the real tokens, and `lookahead` says how many draft
    /// tokens each sequence may take (their slots are allocated and budgeted).
    fn build_output(&self, step: Step) -> SchedulerOutput {
        let mut lookahead = Vec::new();
        let mut seqs = Vec::with_capacity(step.scheduled.len());
        for &(id, n) in &step.scheduled {
            let Some(req) = self.requests.get(&id) else {
                continue;
            };
            let start = req.num_computed_tokens();
            let real = n.min(req.num_tokens() - start);
            if n > real {
                lookahead.resize(seqs.len(), 0);
                lookahead.push(n - real);
            } else if !lookahead.is_empty() {
                lookahead.push(0);
            }
            seqs.push(SeqBatch {
                request_id: id,
                tokens: req.all_token_ids()[start..start + real].to_vec(),
                start_pos: start,
                block_table: req.block_table().to_vec(),
                num_logits: usize::from(start + real == req.num_tokens()),
                adapter: req.params().adapter,
            });
        }
        if !lookahead.is_empty() {
            lookahead.resize(seqs.len(), 0);
        }
        SchedulerOutput {
            batch: BatchInput { seqs },
            preempted: step.preempted,
            lookahead,
        }
    }
}

/// With a window on every layer and chunked prefill, the longest chunk whose live blocks fit
/// the pool; `None` when the window does not bound a sequence's blocks (no window, no chunked
/// prefill — a preempted request recomputes its whole context in one chunk — or a pool too
/// small for even one token of window).
fn window_chunk_limit(config: &SchedulerConfig, window: Option<AttentionWindow>) -> Option<usize> {
    if !config.enable_chunked_prefill {
        return None;
    }
    window?.max_chunk(config.num_kv_blocks)
}
