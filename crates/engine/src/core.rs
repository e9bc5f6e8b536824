//! [`EngineCore`]: the single owner of the scheduler (and through it every request's entry) and
//! the executor. One [`EngineCore::step`] is
//!
//! ```text
//! expire queue timeouts -> schedule -> execute -> sample each row -> scheduler.update
//!                       -> per token: detokenize, stop strings, send TokenEvent,
//!                          end_reason -> finish(id, reason) -> send Finished
//! ```
//!
//! Admission: a request with a first-token objective (`ttft_slo`) is first checked against
//! [`TtftPredictor`], which the step loop feeds with each step's timing; one the prediction
//! says will miss its objective is refused at once ([`EngineFailure::SloUnattainable`]).
//!
//! A request ends in exactly one of three ways, each one function: [`EngineCore::finish`]
//! (generation completed, with the reason decided by [`end_reason`]), [`EngineCore::abort`]
//! (the client went away) or `fail` (the server gave up: a model error, a queue timeout,
//! shutdown). The core is synchronous and knows nothing of threads;
//! [`crate::handle::EngineHandle`] runs it on its own thread and feeds it commands between steps.

mod constrained;
mod embed;
mod kv_event_link;
mod kv_tier_link;
mod prompt_scores;
mod step_watch;

pub use kv_event_link::KvEventLink;
pub use kv_tier_link::KvTierLink;
pub use step_watch::StepWatch;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use crate::adapters::{AdapterCard, AdapterCatalog, AdapterError};
use crate::api::{EngineEvent, EngineFailure, EngineRequest, EngineStats, RequestLimits};
use crate::config::EngineConfig;
use crate::constraint::ConstraintFactory;
use crate::executor::{BatchOutput, Executor};
use crate::kv::disk_tier::DiskTier;
use crate::kv::KvLeak;
use crate::lora_metrics::LoraRecorder;
use crate::metrics::{
    record_config, record_idle_check, record_iteration, record_iteration_times, record_pool_busy,
    record_slo_rejected, ExpertRecorder, StepRecorder,
};
use crate::model_failure::ModelFailure;
use crate::output::TokenDecoder;
use crate::request::{FinishReason, Generation, Request, RequestId};
use crate::sampling::SamplerScratch;
use crate::scheduler::{RequestOutput, Scheduler, SchedulerError, SchedulerOutput};
use crate::speculative::{verify_drafts, SpecCounters, Speculator};
use crate::ttft_predictor::{StepSample, TtftPredictor};

/// A shared decoder usable where the output module wants a sized [`TokenDecoder`].
struct SharedDecoder(Arc<dyn TokenDecoder + Send + Sync>);

impl TokenDecoder for SharedDecoder {
    fn decode(&self, ids: &[u32]) -> String {
        self.0.decode(ids)
    }
    fn decode_with_special(&self, ids: &[u32]) -> String {
        self.0.decode_with_special(ids)
    }
}

/// Scheduler, executor and decoder; driven by [`EngineCore::step`].
pub struct EngineCore {
    scheduler: Scheduler,
    executor: Box<dyn Executor>,
    decoder: SharedDecoder,
    eos_token_ids: Vec<u32>,
    recorder: StepRecorder,
    /// Publishes a mixture-of-experts executor's routed-token counters.
    experts: Option<ExpertRecorder>,
    prompt_tokens_total: u64,
    generation_tokens_total: u64,
    /// The executor's output buffer, reused every step.
    logits: BatchOutput,
    /// The LoRA adapters requests may name, and which are resident in the executor.
    adapters: AdapterCatalog,
    lora_recorder: LoraRecorder,
    /// Speculative decoding, when enabled.
    spec: Option<Speculator>,
    /// This step's emitted tokens, and how many belong to each sequence with logits rows.
    emitted: Vec<u32>,
    emitted_counts: Vec<usize>,
    /// Working space every request's sampler borrows (one sampler runs at a time).
    sampler_scratch: SamplerScratch,
    /// Compiles the grammars of constrained requests; `None`: structured output is refused.
    constraints: Option<Arc<ConstraintFactory>>,
    /// Step costs, for first-token predictions.
    predictor: TtftPredictor,
    /// Refuse requests whose first-token objective the predictor says cannot be met.
    slo_admission: bool,
    idle_checks: IdleChecks,
    /// The KV disk tier under the prefix cache, when there is one.
    tier: Option<KvTierLink>,
    /// Where the prefix cache's changes go, when someone watches them.
    kv_events: Option<KvEventLink>,
    /// Where steps of traced requests are reported, when someone watches them.
    steps: Option<StepWatch>,
}

/// Counts of [`EngineCore::check_idle`] runs and failures.
#[derive(Debug, Clone, Copy, Default)]
struct IdleChecks {
    runs: u64,
    failures: u64,
}

impl EngineCore {
    /// A core over `executor`, whose KV geometry sizes the scheduler's block pool. `eos_token_ids`
    /// end every request that does not set `ignore_eos`.
    pub fn new(
        executor: Box<dyn Executor>,
        decoder: Arc<dyn TokenDecoder + Send + Sync>,
        eos_token_ids: Vec<u32>,
        config: &EngineConfig,
    ) -> Result<Self, SchedulerError> {
        config
            .lora
            .validate()
            .map_err(|_| SchedulerError::InvalidConfig("invalid LoRA limits"))?;
        let scheduler = Scheduler::new(config.scheduler_config(executor.kv_geometry()))?;
        record_config(config.max_num_seqs, scheduler.config().num_kv_blocks);
        let experts = executor.expert_token_counts().map(ExpertRecorder::new);
        Ok(EngineCore {
            scheduler,
            executor,
            decoder: SharedDecoder(decoder),
            eos_token_ids,
            recorder: StepRecorder::default(),
            experts,
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            logits: BatchOutput::default(),
            adapters: AdapterCatalog::new(config.lora),
            lora_recorder: LoraRecorder::new(config.lora.max_loras),
            spec: None,
            emitted: Vec::new(),
            emitted_counts: Vec::new(),
            sampler_scratch: SamplerScratch::default(),
            constraints: None,
            predictor: TtftPredictor::new(),
            slo_admission: true,
            idle_checks: IdleChecks::default(),
            tier: None,
            kv_events: None,
            steps: None,
        })
    }

    /// Puts `tier` under the prefix cache: blocks the cache registers are copied to it, and
    /// prompts continue their prefix hit there (see [`KvTierLink`]). Fails only if its reader
    /// thread cannot be spawned.
    pub fn with_disk_tier(mut self, tier: DiskTier) -> std::io::Result<Self> {
        self.tier = Some(KvTierLink::new(tier, &mut self.scheduler)?);
        Ok(self)
    }

    /// Sends the prefix cache's changes to `sink` from now on, starting with a snapshot
    /// (see [`KvEventLink`]); replaces an earlier watcher.
    pub fn watch_kv_events(&mut self, sink: tokio::sync::mpsc::Sender<Vec<crate::kv::KvEvent>>) {
        let tier = self.tier.as_ref().map(KvTierLink::tier);
        self.kv_events = Some(KvEventLink::new(sink, self.scheduler.kv_mut(), tier));
    }

    /// Hands the prefix cache's changes since the last call to the watcher, if any (never
    /// waiting for it); forgets a watcher that went away.
    /// Reports the steps that run traced requests to `sink` from now on (one watcher: a new
    /// one replaces the last).
    pub fn watch_steps(&mut self, sink: tokio::sync::mpsc::Sender<crate::step_trace::StepTrace>) {
        self.steps = Some(StepWatch::new(sink));
    }

    /// Publishes the prefix cache's changes to the watcher, if any.
    pub fn publish_kv_events(&mut self) {
        if let Some(link) = &mut self.kv_events {
            let tier = self.tier.as_ref().map(KvTierLink::tier);
            if !link.publish(self.scheduler.kv_mut(), tier) {
                self.kv_events = None;
                self.scheduler.kv_mut().stop_kv_events();
            }
        }
    }

    /// The same core decoding speculatively with `speculator` (see [`crate::speculative`]).
    pub fn with_speculator(mut self, speculator: Speculator) -> Self {
        self.spec = Some(speculator);
        self
    }

    /// Speculative-decoding counts, when speculation is enabled.
    pub fn spec_counters(&self) -> Option<SpecCounters> {
        self.spec.as_ref().map(Speculator::counters)
    }

    /// KV blocks not held by any request (free or only kept by the prefix cache).
    pub fn num_free_kv_blocks(&self) -> usize {
        self.scheduler.kv().num_free_blocks()
    }

    /// Whether requests with a first-token objective the engine predicts it cannot meet are
    /// refused at admission (on by default; off: objectives are only counted met or missed).
    pub fn with_slo_admission(mut self, enabled: bool) -> Self {
        self.slo_admission = enabled;
        self
    }

    /// The step costs measured so far (what first-token predictions are made from).
    pub fn predictor(&self) -> &TtftPredictor {
        &self.predictor
    }

    /// Enables structured output: requests with a grammar are compiled by `factory`.
    pub fn with_constraints(mut self, factory: Option<Arc<ConstraintFactory>>) -> Self {
        self.constraints = factory;
        self
    }

    /// What a request must fit: the executor's vocabulary and the scheduler's context limit.
    pub fn limits(&self) -> RequestLimits {
        RequestLimits {
            vocab_size: self.executor.vocab_size(),
            max_model_len: self.scheduler.max_model_len(),
        }
    }

    /// Whether any request is waiting or running.
    pub fn has_unfinished(&self) -> bool {
        self.scheduler.has_unfinished()
    }

    /// Queues request `id`; its events go to `events`. See [`EngineCore::admit`].
    pub fn add_request(
        &mut self,
        id: RequestId,
        req: EngineRequest,
        events: UnboundedSender<EngineEvent>,
    ) {
        // The refusal was sent on `events` as well.
        let _ = self.admit(id, req, events);
    }

    /// Queues request `id`; its events go to `events`. A request refused here gets a `Failed`
    /// event at once, and the same failure is returned: one whose first-token objective cannot
    /// be met ([`EngineFailure::SloUnattainable`]), one the scheduler refuses, or one whose
    /// adapter is not registered or cannot be made resident (so no batch ever names an adapter
    /// the executor does not hold).
    pub fn admit(
        &mut self,
        id: RequestId,
        req: EngineRequest,
        events: UnboundedSender<EngineEvent>,
    ) -> Result<(), EngineFailure> {
        let refuse = |failure: EngineFailure| {
            let _ = events.send(EngineEvent::Failed(failure.clone()));
            Err(failure)
        };
        if let Some(adapter) = req.adapter() {
            let uses = self.scheduler.adapter_uses();
            if let Err(e) = self
                .adapters
                .acquire(adapter, self.executor.as_mut(), &uses)
            {
                return refuse(EngineFailure::Adapter(e.to_string()));
            }
        }
        let prompt_len = req.prompt_ids().len();
        let grammar = req.sampling().grammar.clone();
        let (slo, arrival) = (req.ttft_slo(), req.arrival());
        let mut request = Request::from_engine(id, req, &self.eos_token_ids, events.clone());
        if let Some(slo) = slo.filter(|_| self.slo_admission) {
            if let Err(failure) = self.check_slo(&mut request, slo, arrival) {
                record_slo_rejected();
                return refuse(failure);
            }
        }
        if let Err(failure) = self.constrain(&mut request, grammar.as_ref()) {
            return refuse(failure);
        }
        if let Err(e) = self.scheduler.add_request(request) {
            let failure = match e {
                SchedulerError::PromptTooLong { .. } => EngineFailure::TooLong(prompt_len),
                e => EngineFailure::Internal(format!("request rejected by the scheduler: {e}")),
            };
            return refuse(failure);
        }
        Ok(())
    }

    /// Refuses `request` when its first token, predicted from the queue ahead of it and the
    /// measured step costs, would come later than `slo` after `arrival`. Without a measurement
    /// yet, only a request whose objective already passed is refused.
    fn check_slo(
        &mut self,
        request: &mut Request,
        slo: Duration,
        arrival: Instant,
    ) -> Result<(), EngineFailure> {
        let waited = Instant::now().saturating_duration_since(arrival);
        let backlog = self.scheduler.backlog(request);
        let ahead = self.predictor.predict(&backlog).unwrap_or(Duration::ZERO);
        let predicted = waited + ahead;
        if predicted <= slo {
            return Ok(());
        }
        tracing::debug!(
            request = request.id(),
            predicted_ms = predicted.as_millis() as u64,
            objective_ms = slo.as_millis() as u64,
            prefill_tokens = backlog.prefill_tokens,
            decode_seqs = backlog.decode_seqs,
            "refusing a request that would miss its first-token objective"
        );
        Err(EngineFailure::SloUnattainable {
            predicted_ms: predicted.as_millis().try_into().unwrap_or(u64::MAX),
            objective_ms: slo.as_millis().try_into().unwrap_or(u64::MAX),
        })
    }

    /// Registers the LoRA adapter at `path` as `name` and loads it into the executor.
    pub fn load_adapter(&mut self, name: &str, path: &Path) -> Result<AdapterCard, AdapterError> {
        let uses = self.scheduler.adapter_uses();
        let card = self
            .adapters
            .register(name, path, self.executor.as_mut(), &uses);
        self.record_lora();
        card
    }

    /// Unloads the adapter called `name`; refused while running or waiting requests use it.
    pub fn unload_adapter(&mut self, name: &str) -> Result<(), AdapterError> {
        let uses = self.scheduler.adapter_uses();
        let result = self
            .adapters
            .unregister(name, self.executor.as_mut(), &uses)
            .map(|_| ());
        self.record_lora();
        result
    }

    /// The registered adapters.
    pub fn adapters(&self) -> Vec<AdapterCard> {
        self.adapters.cards()
    }

    /// Changes with every load, unload and eviction (so callers republish [`Self::adapters`]
    /// only when it moved).
    pub fn adapters_version(&self) -> u64 {
        self.adapters.loads_total()
            + self.adapters.evictions_total()
            + self.adapters.unloads_total()
    }

    /// Ends request `id` normally with `reason`: frees its blocks and sends `Finished`.
    pub fn finish(&mut self, id: RequestId, reason: FinishReason) {
        if let Some(req) = self.scheduler.finish(id, reason) {
            req.into_generation().finish(reason, Instant::now());
        }
    }

    /// Cancels request `id` because its client went away, freeing its blocks. False if unknown.
    pub fn abort(&mut self, id: RequestId) -> bool {
        match self.scheduler.abort(id) {
            Some(req) => {
                req.into_generation().aborted(Instant::now());
                true
            }
            None => false,
        }
    }

    /// Ends every live request with `Failed(failure)` and frees its blocks.
    pub fn fail_all(&mut self, failure: EngineFailure) {
        let ids: Vec<RequestId> = self.scheduler.request_ids().collect();
        for id in ids {
            self.fail(id, failure.clone());
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
            kv_window_blocks_freed_total: s.window_blocks_freed,
            prompt_tokens_total: self.prompt_tokens_total,
            generation_tokens_total: self.generation_tokens_total,
            kv_free_blocks: self.scheduler.kv().num_free_blocks(),
            kv_fragmentation: s.kv_fragmentation,
            kv_idle_checks_total: self.idle_checks.runs,
            kv_idle_check_failures_total: self.idle_checks.failures,
        }
    }

    /// Run when the engine has no request left: checks that every KV block came back and that
    /// the block pool's invariants hold, counting (and logging) any failure.
    pub fn check_idle(&mut self) -> Result<(), KvLeak> {
        let result = self.scheduler.check_idle();
        self.idle_checks.runs += 1;
        if let Err(e) = &result {
            self.idle_checks.failures += 1;
            tracing::error!("idle KV check failed: {e}");
        }
        record_idle_check(result.is_ok());
        result
    }

    /// Runs one step; returns the number of tokens computed (0 when nothing could run).
    pub fn step(&mut self) -> usize {
        let now = Instant::now();
        self.expire_queued(now);
        if let Some(spec) = &mut self.spec {
            spec.plan(&mut self.scheduler);
        }
        if let Some(tier) = &mut self.tier {
            tier.before_schedule(&mut self.scheduler, self.executor.as_mut());
        }
        let mut out = self.scheduler.schedule();
        if let Some(spec) = &mut self.spec {
            spec.propose(&mut out, &mut self.scheduler, self.executor.vocab_size());
        }
        let computed = out.num_batched_tokens();
        if !out.is_empty() {
            self.mark_scheduled(&out, now);
            let sample = self.step_shape(&out);
            let traced = self
                .steps
                .as_ref()
                .map(|_| StepWatch::traced(&out, &self.scheduler));
            let started = Instant::now();
            match self.execute_and_update(&out) {
                Ok(()) => self.predictor.record(StepSample {
                    elapsed: started.elapsed(),
                    ..sample
                }),
                Err(failure) => self.fail_batch(&out, &failure),
            }
            if let (Some(watch), Some(seqs)) = (&self.steps, traced) {
                if !watch.send(started, seqs, out.batch.seqs.len()) {
                    self.steps = None;
                }
            }
            if let Some(tier) = &mut self.tier {
                tier.keep_new_blocks(&mut self.scheduler, self.executor.as_ref());
            }
            record_iteration(computed);
        }
        self.recorder.record(&self.scheduler.stats());
        if let Some(experts) = &mut self.experts {
            experts.record();
        }
        self.record_lora();
        computed
    }

    /// Publishes the LoRA gauge (running and waiting adapters) and counters, once any adapter
    /// was registered.
    fn record_lora(&mut self) {
        if self.adapters.loads_total() == 0 {
            return;
        }
        let names = |ids: &mut dyn Iterator<Item = RequestId>| {
            let mut names: Vec<&str> = ids
                .filter_map(|id| self.scheduler.request(id)?.params().adapter)
                .filter_map(|a| self.adapters.name(a))
                .collect();
            names.sort_unstable();
            names.dedup();
            names.join(",")
        };
        let running = names(&mut self.scheduler.running_ids().iter().copied());
        let waiting = names(&mut self.scheduler.waiting_ids().into_iter());
        self.lora_recorder.record(
            &running,
            &waiting,
            self.adapters.loads_total(),
            self.adapters.evictions_total(),
        );
    }

    /// Execute, sample, update: the model step proper. An error fails the whole batch.
    fn execute_and_update(&mut self, out: &SchedulerOutput) -> Result<(), EngineFailure> {
        let mut logits = std::mem::take(&mut self.logits);
        let started = Instant::now();
        let forward = self
            .execute_with_masks(out, &mut logits)
            .map_err(|e| EngineFailure::Model(e.into()));
        let sampling = Instant::now();
        let result = forward.and_then(|()| self.sample_batch(out, &mut logits));
        self.logits = logits;
        result?;
        record_iteration_times(sampling - started, sampling.elapsed());
        if let Some(pool) = self.executor.pool_busy() {
            record_pool_busy(pool);
        }
        let outputs = self
            .scheduler
            .update_emitted(out, &self.emitted, &self.emitted_counts)
            .map_err(|e| EngineFailure::Internal(e.to_string()))?;
        let now = Instant::now();
        // A request that ends mid-way (a stop string among accepted draft tokens) drops the
        // tokens after that point.
        let mut ended = None;
        for o in outputs {
            if ended == Some(o.request_id) {
                continue;
            }
            let id = o.request_id;
            if self.apply_token(o, now) {
                ended = Some(id);
            }
        }
        Ok(())
    }

    /// Fails requests that never ran and outlived their queue timeout.
    fn expire_queued(&mut self, now: Instant) {
        let expired: Vec<_> = self
            .scheduler
            .request_ids()
            .filter_map(|id| {
                let req = self.scheduler.request(id)?;
                req.generation().queue_expired(now).map(|d| (id, d))
            })
            .collect();
        for (id, limit) in expired {
            self.fail(id, EngineFailure::QueueTimeout(limit));
        }
    }

    /// What `out` computes, for the predictor: prompt tokens (a sequence that starts inside its
    /// prompt, including one recomputing after preemption) and decoding sequences (starting
    /// past the prompt: generated tokens, and draft tokens with them). Elapsed time is filled
    /// in after the step.
    fn step_shape(&self, out: &SchedulerOutput) -> StepSample {
        let mut sample = StepSample {
            prefill_tokens: 0,
            decode_seqs: 0,
            elapsed: Duration::ZERO,
        };
        for seq in &out.batch.seqs {
            let prompt_len = self
                .scheduler
                .request(seq.request_id)
                .map_or(0, |r| r.prompt_token_ids().len());
            if seq.start_pos >= prompt_len {
                sample.decode_seqs += 1;
            } else {
                sample.prefill_tokens += seq.tokens.len();
            }
        }
        sample
    }

    fn mark_scheduled(&mut self, out: &SchedulerOutput, now: Instant) {
        for seq in &out.batch.seqs {
            let Some(req) = self.scheduler.request_mut(seq.request_id) else {
                continue;
            };
            if let Some(prompt_len) = req.generation_mut().0.mark_scheduled(now, seq.start_pos) {
                self.prompt_tokens_total += prompt_len as u64;
            }
        }
    }

    /// Samples each sequence's logits rows, in batch order, into `self.emitted` (with
    /// `self.emitted_counts`): one token for an ordinary row, the accepted draft tokens and one
    /// more for a sequence that verifies drafts. A request whose rows cannot be sampled fails
    /// alone: it is removed here, and `update`, which skips requests that are no longer live,
    /// never applies the token recorded for it. A row without a live request is an engine bug
    /// and fails the batch.
    fn sample_batch(
        &mut self,
        out: &SchedulerOutput,
        batch: &mut BatchOutput,
    ) -> Result<(), EngineFailure> {
        let rows = out.batch.num_logits();
        if batch.vocab == 0 || batch.num_rows() != rows {
            return Err(EngineFailure::Model(ModelFailure::LogitsRows {
                returned: batch.num_rows(),
                wanted: rows,
            }));
        }
        let vocab = batch.vocab;
        self.emitted.clear();
        self.emitted_counts.clear();
        let mut failed = Vec::new();
        let mut row = 0;
        for seq in out.sampling_seqs() {
            let id = seq.request_id;
            let m = seq.num_logits;
            let logits = &mut batch.logits[row * vocab..(row + m) * vocab];
            row += m;
            let req = self.scheduler.request_mut(id).ok_or_else(|| {
                EngineFailure::Internal(format!("request {id} was scheduled but is not live"))
            })?;
            let (generation, history) = req.generation_mut();
            let before = self.emitted.len();
            let result = if m == 1 {
                generation
                    .sample(logits, history, &mut self.sampler_scratch)
                    .map(|t| self.emitted.push(t))
            } else {
                let drafts = &seq.tokens[seq.tokens.len() - (m - 1)..];
                verify_drafts(
                    generation,
                    logits,
                    vocab,
                    history,
                    drafts,
                    &mut self.emitted,
                    &mut self.sampler_scratch,
                )
                .map(|accepted| {
                    if let Some(spec) = &mut self.spec {
                        spec.record(req.spec_state_mut(), drafts.len(), accepted);
                    }
                })
            };
            if let Err(e) = result {
                failed.push((id, e));
                // Keeps counts and tokens aligned; never applied (the request is removed below).
                self.emitted.truncate(before);
                self.emitted.push(0);
            }
            self.emitted_counts.push(self.emitted.len() - before);
        }
        for (id, e) in failed {
            self.fail(id, EngineFailure::Model(e.into()));
        }
        Ok(())
    }

    /// Streams a request's new token and ends the request if [`end_reason`] says so; true
    /// when it ended.
    fn apply_token(&mut self, o: RequestOutput, now: Instant) -> bool {
        self.generation_tokens_total += 1;
        let Some(req) = self.scheduler.request_mut(o.request_id) else {
            // `update` reports only live requests.
            tracing::error!(
                request = o.request_id,
                "a token was sampled for no live request"
            );
            return true;
        };
        let (generation, _) = req.generation_mut();
        let stopped = generation.push_token(&self.decoder, o.token, now);
        match end_reason(generation, &self.decoder, stopped, o.stop) {
            Some(reason) => {
                self.finish(o.request_id, reason);
                true
            }
            None => false,
        }
    }

    fn fail_batch(&mut self, out: &SchedulerOutput, failure: &EngineFailure) {
        for seq in &out.batch.seqs {
            self.fail(seq.request_id, failure.clone());
        }
    }

    /// Ends request `id` with `failure` (as [`EngineFailure::finish_reason`] says: `Error`, or
    /// `Abort` when the server gave up): frees its blocks and sends `Failed` with the cause.
    fn fail(&mut self, id: RequestId, failure: EngineFailure) {
        if let Some(req) = self.scheduler.finish(id, failure.finish_reason()) {
            req.into_generation().fail(failure);
        }
    }
}

/// How a request ends after its latest token, if it does; the one place a finish reason is
/// decided. A stop string ends it as `Stop`; otherwise the token-level rule's `stop` (a stop
/// token, `max_tokens`, the context limit) does, after the withheld text is flushed, and a stop
/// string completed by that flush makes it a `Stop` as well.
fn end_reason(
    generation: &mut Generation,
    decoder: &impl TokenDecoder,
    stop_string: bool,
    stop: Option<FinishReason>,
) -> Option<FinishReason> {
    if stop_string {
        return Some(FinishReason::Stop);
    }
    let reason = stop?;
    Some(if generation.flush(decoder) {
        FinishReason::Stop
    } else {
        reason
    })
}
