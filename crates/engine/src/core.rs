//! [`EngineCore`]: the single owner of the scheduler, the executor and every request's sampler
//! and text stream. One [`EngineCore::step`] is
//!
//! ```text
//! expire queue timeouts -> schedule -> execute -> sample each row -> scheduler.update
//!                       -> per token: detokenize, stop strings, send TokenEvent
//!                       -> per finished request: send Finished (usage, timings)
//! ```
//!
//! The core is synchronous and knows nothing of threads; [`crate::handle::EngineHandle`] runs it
//! on its own thread and feeds it commands between steps.

mod seq;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use crate::api::{EngineEvent, EngineFailure, EngineRequest, EngineStats};
use crate::executor::{BatchOutput, Executor};
use crate::metrics::{record_iteration, StepRecorder};
use crate::output::TokenDecoder;
use crate::request::{FinishReason, Request, RequestId, RequestParams};
use crate::scheduler::{
    RequestOutput, Scheduler, SchedulerConfig, SchedulerError, SchedulerOutput,
};
use seq::SeqState;

/// A shared decoder usable where the output module wants a sized [`TokenDecoder`].
struct SharedDecoder(Arc<dyn TokenDecoder + Send + Sync>);

impl TokenDecoder for SharedDecoder {
    fn decode(&self, ids: &[u32]) -> String {
        self.0.decode(ids)
    }
}

/// Scheduler, executor, decoder and per-request state; driven by [`EngineCore::step`].
pub struct EngineCore {
    scheduler: Scheduler,
    executor: Box<dyn Executor>,
    decoder: SharedDecoder,
    eos_token_ids: Vec<u32>,
    seqs: HashMap<RequestId, SeqState>,
    recorder: StepRecorder,
    prompt_tokens_total: u64,
    generation_tokens_total: u64,
    /// The executor's output buffer, reused every step.
    logits: BatchOutput,
}

impl EngineCore {
    /// A core over `executor` with a scheduler built from `config`. `eos_token_ids` end every
    /// request that does not set `ignore_eos`.
    pub fn new(
        executor: Box<dyn Executor>,
        decoder: Arc<dyn TokenDecoder + Send + Sync>,
        eos_token_ids: Vec<u32>,
        config: SchedulerConfig,
    ) -> Result<Self, SchedulerError> {
        Ok(EngineCore {
            scheduler: Scheduler::new(config)?,
            executor,
            decoder: SharedDecoder(decoder),
            eos_token_ids,
            seqs: HashMap::new(),
            recorder: StepRecorder::default(),
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            logits: BatchOutput::default(),
        })
    }

    /// Longest prompt plus output a request may have (the scheduler's clamped context limit).
    pub fn max_model_len(&self) -> usize {
        self.scheduler.max_model_len()
    }

    /// Vocabulary size of the executor's logits.
    pub fn vocab_size(&self) -> usize {
        self.executor.vocab_size()
    }

    /// Whether any request is waiting or running.
    pub fn has_unfinished(&self) -> bool {
        self.scheduler.has_unfinished()
    }

    /// Queues request `id`; its events go to `events`. A request the scheduler refuses gets a
    /// `Failed` event at once.
    pub fn add_request(
        &mut self,
        id: RequestId,
        req: EngineRequest,
        events: UnboundedSender<EngineEvent>,
    ) {
        let state = match SeqState::new(&req, events.clone()) {
            Ok(s) => s,
            Err(e) => {
                let _ = events.send(EngineEvent::Failed(EngineFailure::Model(format!(
                    "invalid sampling parameters: {e}"
                ))));
                return;
            }
        };
        let params = self.request_params(&req);
        let prompt_len = req.prompt_ids.len();
        match self
            .scheduler
            .add_request(Request::new(id, req.prompt_ids, params))
        {
            Ok(()) => {
                self.seqs.insert(id, state);
            }
            Err(SchedulerError::PromptTooLong { .. }) => {
                state.fail(EngineFailure::TooLong(prompt_len))
            }
            Err(e) => state.fail(EngineFailure::Model(format!(
                "request rejected by the scheduler: {e}"
            ))),
        }
    }

    fn request_params(&self, req: &EngineRequest) -> RequestParams {
        let s = &req.sampling;
        RequestParams {
            max_tokens: s.max_tokens,
            min_tokens: 0,
            priority: req.priority,
            eos_token_ids: if s.ignore_eos {
                Vec::new()
            } else {
                self.eos_token_ids.clone()
            },
            stop_token_ids: s.stop_token_ids.clone(),
            ignore_eos: s.ignore_eos,
            cache_key: None,
        }
    }

    /// Cancels request `id` (its client went away), freeing its blocks. False if unknown.
    pub fn abort(&mut self, id: RequestId) -> bool {
        self.scheduler.abort(id);
        match self.seqs.remove(&id) {
            Some(state) => {
                state.aborted(Instant::now());
                true
            }
            None => false,
        }
    }

    /// Ends every live request with `Failed(failure)` and frees its blocks.
    pub fn fail_all(&mut self, failure: EngineFailure) {
        let ids: Vec<RequestId> = self.seqs.keys().copied().collect();
        for id in ids {
            self.fail_request(id, failure.clone());
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> EngineStats {
        let s = self.scheduler.stats();
        let cfg = self.scheduler.config();
        EngineStats {
            running: s.num_running,
            waiting: s.num_waiting,
            kv_usage: s.kv_usage,
            num_kv_blocks: cfg.num_kv_blocks,
            block_size: cfg.block_size,
            preemptions_total: s.num_preemptions,
            prefix_cache_queries_total: s.prefix_cache.queries,
            prefix_cache_hits_total: s.prefix_cache.hits,
            prompt_tokens_total: self.prompt_tokens_total,
            generation_tokens_total: self.generation_tokens_total,
        }
    }

    /// Runs one step; returns the number of tokens computed (0 when nothing could run).
    pub fn step(&mut self) -> usize {
        let now = Instant::now();
        self.expire_queued(now);
        let out = self.scheduler.schedule();
        let computed = out.num_batched_tokens();
        if !out.is_empty() {
            self.mark_scheduled(&out, now);
            let mut logits = std::mem::take(&mut self.logits);
            match self
                .executor
                .execute_into(&out.to_batch_input(), &mut logits)
            {
                Ok(()) => self.process_batch(&out, &mut logits),
                Err(e) => self.fail_batch(&out, &EngineFailure::Model(e.to_string())),
            }
            self.logits = logits;
            record_iteration(computed);
        }
        self.recorder.record(&self.scheduler.stats());
        computed
    }

    /// Fails requests that never ran and outlived their queue timeout.
    fn expire_queued(&mut self, now: Instant) {
        let expired: Vec<_> = self
            .seqs
            .iter()
            .filter_map(|(&id, s)| s.queue_expired(now).map(|d| (id, d)))
            .collect();
        for (id, limit) in expired {
            self.fail_request(id, EngineFailure::QueueTimeout(limit));
        }
    }

    fn mark_scheduled(&mut self, out: &SchedulerOutput, now: Instant) {
        for seq in &out.seqs {
            let state = self.seqs.get_mut(&seq.request_id);
            if let Some(prompt_len) = state.and_then(|s| s.mark_scheduled(now, seq.start_pos)) {
                self.prompt_tokens_total += prompt_len as u64;
            }
        }
    }

    /// Samples one token per logits row, then applies the step to the scheduler and streams.
    fn process_batch(&mut self, out: &SchedulerOutput, batch: &mut BatchOutput) {
        let ids = out.sampling_request_ids();
        if batch.vocab == 0 || batch.num_rows() != ids.len() {
            let msg = format!(
                "executor returned {} logits rows for {} sequences",
                batch.num_rows(),
                ids.len()
            );
            return self.fail_batch(out, &EngineFailure::Model(msg));
        }
        let mut sampled = Vec::with_capacity(ids.len());
        let mut failed = Vec::new();
        for (&id, row) in ids.iter().zip(batch.logits.chunks_mut(batch.vocab)) {
            sampled.push(self.sample_row(id, row).unwrap_or_else(|e| {
                failed.push((id, e));
                0
            }));
        }
        for (id, e) in failed {
            self.scheduler.abort(id);
            self.fail_request(id, EngineFailure::Model(format!("sampling failed: {e}")));
        }
        match self.scheduler.update(out, &sampled) {
            Ok(outputs) => outputs.into_iter().for_each(|o| self.apply_output(o)),
            Err(e) => self.fail_batch(out, &EngineFailure::Model(e.to_string())),
        }
    }

    fn sample_row(
        &mut self,
        id: RequestId,
        row: &mut [f32],
    ) -> Result<u32, crate::sampling::SampleError> {
        let history = self
            .scheduler
            .request(id)
            .map_or(&[][..], Request::all_token_ids);
        match self.seqs.get_mut(&id) {
            Some(state) => state.sample(row, history),
            // Not reachable: every scheduled request has a state; any token keeps `update` aligned.
            None => Ok(0),
        }
    }

    /// Streams a request's new tokens and finishes it on a stop string or a scheduler finish.
    fn apply_output(&mut self, o: RequestOutput) {
        let now = Instant::now();
        let id = o.request_id;
        let Some(state) = self.seqs.get_mut(&id) else {
            return;
        };
        let mut stopped = false;
        for &token in &o.new_token_ids {
            self.generation_tokens_total += 1;
            if state.push_token(&self.decoder, token, now) {
                stopped = true;
                break;
            }
        }
        let reason = if stopped {
            Some(FinishReason::Stop)
        } else {
            o.finish_reason
        };
        if let Some(reason) = reason {
            self.scheduler.abort(id);
            if let Some(state) = self.seqs.remove(&id) {
                state.finish(&self.decoder, reason, stopped, now);
            }
        }
    }

    fn fail_batch(&mut self, out: &SchedulerOutput, failure: &EngineFailure) {
        for seq in &out.seqs {
            self.fail_request(seq.request_id, failure.clone());
        }
    }

    fn fail_request(&mut self, id: RequestId, failure: EngineFailure) {
        self.scheduler.abort(id);
        if let Some(state) = self.seqs.remove(&id) {
            state.fail(failure);
        }
    }
}
