//! Engine-side metrics, recorded through the [`metrics`] facade. The engine only records; the
//! server installs a recorder (Prometheus) and calls [`describe`] once so every series has help
//! text and a unit. Without an installed recorder every call here is a no-op.
//!
//! Gauges are refreshed after every step; counters grow as tokens are computed and requests
//! finish; histograms get one sample per request (latencies, token counts), per token
//! (inter-token latency) or per step (batched tokens).

use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};

use std::sync::Arc;

use metrics::Counter;

use crate::api::{EngineFailure, RequestTimings, Usage};
use crate::executor::PoolBusy;
use crate::expert_counts::ExpertTokenCounts;
use crate::request::FinishReason;
use crate::scheduler::SchedulerStats;

/// Metric names, exactly as exported.
pub mod names {
    /// Gauge: requests holding KV blocks.
    pub const NUM_REQUESTS_RUNNING: &str = "kestrel:num_requests_running";
    /// Gauge: requests queued (new or preempted).
    pub const NUM_REQUESTS_WAITING: &str = "kestrel:num_requests_waiting";
    /// Gauge: fraction of KV blocks in use, 0..1.
    pub const KV_CACHE_USAGE_PERC: &str = "kestrel:kv_cache_usage_perc";
    /// Gauge: the configured most requests running at once (set when the engine starts), so
    /// utilisation is `num_requests_running / max_num_seqs`.
    pub const MAX_NUM_SEQS: &str = "kestrel:max_num_seqs";
    /// Counter: prompt tokens of admitted requests.
    pub const PROMPT_TOKENS_TOTAL: &str = "kestrel:prompt_tokens_total";
    /// Counter: generated tokens.
    pub const GENERATION_TOKENS_TOTAL: &str = "kestrel:generation_tokens_total";
    /// Counter, labelled `finished_reason`: requests that finished (stop, length, abort).
    pub const REQUEST_SUCCESS_TOTAL: &str = "kestrel:request_success_total";
    /// Counter, labelled `cause` ([`crate::api::EngineFailure::kind`]): requests the engine
    /// failed (finish reason `error`; not counted as finished).
    pub const REQUEST_FAILURES_TOTAL: &str = "kestrel:request_failures_total";
    /// Counter: preemptions.
    pub const NUM_PREEMPTIONS_TOTAL: &str = "kestrel:num_preemptions_total";
    /// Counter: prompt tokens looked up in the prefix cache.
    pub const PREFIX_CACHE_QUERIES_TOTAL: &str = "kestrel:prefix_cache_queries_total";
    /// Counter: prompt tokens found in the prefix cache.
    pub const PREFIX_CACHE_HITS_TOTAL: &str = "kestrel:prefix_cache_hits_total";
    /// Counter: KV blocks released while their request ran because they fell out of the
    /// attention window of every layer (sliding-window models only).
    pub const KV_WINDOW_BLOCKS_FREED_TOTAL: &str = "kestrel:kv_window_blocks_freed_total";
    /// Histogram (seconds): arrival to first generated token.
    pub const TIME_TO_FIRST_TOKEN_SECONDS: &str = "kestrel:time_to_first_token_seconds";
    /// Histogram (seconds): gap between consecutive generated tokens.
    pub const INTER_TOKEN_LATENCY_SECONDS: &str = "kestrel:inter_token_latency_seconds";
    /// Histogram (seconds): arrival to finish.
    pub const E2E_REQUEST_LATENCY_SECONDS: &str = "kestrel:e2e_request_latency_seconds";
    /// Histogram (seconds): arrival to first scheduling.
    pub const REQUEST_QUEUE_TIME_SECONDS: &str = "kestrel:request_queue_time_seconds";
    /// Histogram (tokens): prompt length of finished requests.
    pub const REQUEST_PROMPT_TOKENS: &str = "kestrel:request_prompt_tokens";
    /// Histogram (tokens): generated length of finished requests.
    pub const REQUEST_GENERATION_TOKENS: &str = "kestrel:request_generation_tokens";
    /// Histogram (tokens): tokens computed per engine step.
    pub const ITERATION_TOKENS_TOTAL: &str = "kestrel:iteration_tokens_total";
    /// Histogram (seconds): the model's forward pass of each engine step (grammar masks
    /// computed beside it included).
    pub const ITERATION_FORWARD_SECONDS: &str = "kestrel:iteration_forward_seconds";
    /// Gauge (seconds, only grows): time the inference threads have spent running kernels
    /// since the engine started; `rate(..) / kestrel:inference_pool_threads` is their CPU
    /// utilisation.
    pub const INFERENCE_POOL_BUSY_SECONDS: &str = "kestrel:inference_pool_busy_seconds";
    /// Gauge: threads of the inference pool (the engine thread included).
    pub const INFERENCE_POOL_THREADS: &str = "kestrel:inference_pool_threads";
    /// Histogram (seconds): sampling the logits of each engine step (penalties, masks,
    /// logprobs included).
    pub const ITERATION_SAMPLING_SECONDS: &str = "kestrel:iteration_sampling_seconds";
    /// Counter, labelled `layer` and `expert`: tokens a mixture-of-experts model routed to each
    /// expert of each sparse layer (each token counts once per expert it reaches, so a layer's
    /// series sum to tokens × top-k).
    pub const MOE_EXPERT_TOKENS_TOTAL: &str = "kestrel:moe_expert_tokens_total";
    /// Counter: admitted requests with a first-token objective (`ttft_slo_ms`) whose first
    /// token came within it.
    pub const REQUESTS_SLO_MET_TOTAL: &str = "kestrel:requests_slo_met_total";
    /// Counter: admitted requests with a first-token objective whose first token came late, or
    /// that ended without one after their objective had passed.
    pub const REQUESTS_SLO_MISSED_TOTAL: &str = "kestrel:requests_slo_missed_total";
    /// Counter: requests with a first-token objective refused at admission (429) because the
    /// engine predicted they would miss it.
    pub const REQUESTS_SLO_REJECTED_TOTAL: &str = "kestrel:requests_slo_rejected_total";
    /// Gauge: KV blocks in the pool (set when the engine starts).
    pub const KV_NUM_BLOCKS: &str = "kestrel:kv_num_blocks";
    /// Gauge: KV blocks no request holds (free, or kept only by the prefix cache); equals
    /// `kv_num_blocks` whenever the engine is idle.
    pub const KV_FREE_BLOCKS: &str = "kestrel:kv_free_blocks";
    /// Gauge (0..1): occupied KV slots no running sequence reads, over occupied slots: the
    /// unused tails of running sequences' blocks plus blocks only the prefix cache keeps
    /// ([`crate::kv::KvFragmentation`]).
    pub const KV_CACHE_FRAGMENTATION_PERC: &str = "kestrel:kv_cache_fragmentation_perc";
    /// Counter: idle KV checks (run each time the engine runs out of work: every block free,
    /// no block table left, block-pool invariants hold).
    pub const KV_IDLE_CHECKS_TOTAL: &str = "kestrel:kv_idle_checks_total";
    /// Counter: idle KV checks that found a leaked block or a broken block-pool invariant.
    pub const KV_IDLE_CHECK_FAILURES_TOTAL: &str = "kestrel:kv_idle_check_failures_total";
}

/// Registers help text and units for every engine metric with the installed recorder.
pub fn describe() {
    crate::kv_tier_metrics::describe();
    use names::*;
    describe_gauge!(
        NUM_REQUESTS_RUNNING,
        Unit::Count,
        "Requests holding KV blocks"
    );
    describe_gauge!(NUM_REQUESTS_WAITING, Unit::Count, "Requests waiting to run");
    describe_gauge!(
        KV_CACHE_USAGE_PERC,
        Unit::Percent,
        "Fraction of KV blocks in use (0..1)"
    );
    describe_gauge!(
        KV_CACHE_FRAGMENTATION_PERC,
        Unit::Percent,
        "Occupied KV slots no running sequence reads: unused block tails plus blocks only the prefix cache keeps, over occupied slots (0..1)"
    );
    describe_gauge!(
        MAX_NUM_SEQS,
        Unit::Count,
        "Configured most requests running at once"
    );
    describe_counter!(
        PROMPT_TOKENS_TOTAL,
        Unit::Count,
        "Prompt tokens of admitted requests"
    );
    describe_counter!(GENERATION_TOKENS_TOTAL, Unit::Count, "Generated tokens");
    describe_counter!(
        REQUEST_SUCCESS_TOTAL,
        Unit::Count,
        "Finished requests by finish reason"
    );
    describe_counter!(
        REQUEST_FAILURES_TOTAL,
        Unit::Count,
        "Requests the engine failed, by cause"
    );
    describe_counter!(
        NUM_PREEMPTIONS_TOTAL,
        Unit::Count,
        "Requests preempted for KV space"
    );
    describe_counter!(
        PREFIX_CACHE_QUERIES_TOTAL,
        Unit::Count,
        "Prompt tokens looked up in the prefix cache"
    );
    describe_counter!(
        PREFIX_CACHE_HITS_TOTAL,
        Unit::Count,
        "Prompt tokens found in the prefix cache"
    );
    describe_counter!(
        KV_WINDOW_BLOCKS_FREED_TOTAL,
        Unit::Count,
        "KV blocks released while their request ran, outside every layer's attention window"
    );
    describe_histogram!(
        TIME_TO_FIRST_TOKEN_SECONDS,
        Unit::Seconds,
        "Arrival to first token"
    );
    describe_histogram!(
        INTER_TOKEN_LATENCY_SECONDS,
        Unit::Seconds,
        "Time between generated tokens"
    );
    describe_histogram!(
        E2E_REQUEST_LATENCY_SECONDS,
        Unit::Seconds,
        "Arrival to finish"
    );
    describe_histogram!(
        REQUEST_QUEUE_TIME_SECONDS,
        Unit::Seconds,
        "Arrival to first scheduling"
    );
    describe_histogram!(
        REQUEST_PROMPT_TOKENS,
        Unit::Count,
        "Prompt tokens per finished request"
    );
    describe_histogram!(
        REQUEST_GENERATION_TOKENS,
        Unit::Count,
        "Generated tokens per finished request"
    );
    describe_histogram!(
        ITERATION_TOKENS_TOTAL,
        Unit::Count,
        "Tokens computed per engine step"
    );
    describe_histogram!(
        ITERATION_FORWARD_SECONDS,
        Unit::Seconds,
        "Forward pass of each engine step"
    );
    describe_histogram!(
        ITERATION_SAMPLING_SECONDS,
        Unit::Seconds,
        "Sampling of each engine step"
    );
    describe_gauge!(
        INFERENCE_POOL_BUSY_SECONDS,
        Unit::Seconds,
        "Time the inference threads have spent running kernels (only grows)"
    );
    describe_gauge!(
        INFERENCE_POOL_THREADS,
        Unit::Count,
        "Threads of the inference pool"
    );
    describe_counter!(
        MOE_EXPERT_TOKENS_TOTAL,
        Unit::Count,
        "Tokens routed to each expert of each MoE layer"
    );
    describe_counter!(
        REQUESTS_SLO_MET_TOTAL,
        Unit::Count,
        "Requests with a first-token objective that met it"
    );
    describe_counter!(
        REQUESTS_SLO_MISSED_TOTAL,
        Unit::Count,
        "Admitted requests with a first-token objective that missed it"
    );
    describe_counter!(
        REQUESTS_SLO_REJECTED_TOTAL,
        Unit::Count,
        "Requests refused at admission because their first-token objective could not be met"
    );
    describe_gauge!(KV_NUM_BLOCKS, Unit::Count, "KV blocks in the pool");
    describe_gauge!(
        KV_FREE_BLOCKS,
        Unit::Count,
        "KV blocks no request holds (free or only prefix-cached)"
    );
    describe_counter!(
        KV_IDLE_CHECKS_TOTAL,
        Unit::Count,
        "KV leak and block-pool invariant checks run while idle"
    );
    describe_counter!(
        KV_IDLE_CHECK_FAILURES_TOTAL,
        Unit::Count,
        "Idle KV checks that found a leaked block or a broken invariant"
    );
    crate::speculative::describe_metrics();
}

/// Turns the scheduler's cumulative counters into counter increments, and sets the gauges.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StepRecorder {
    last: SchedulerStats,
}

impl StepRecorder {
    /// Publishes the gauges and the growth of the preemption and prefix-cache counters since
    /// the previous call.
    pub(crate) fn record(&mut self, now: &SchedulerStats) {
        gauge!(names::NUM_REQUESTS_RUNNING).set(now.num_running as f64);
        gauge!(names::NUM_REQUESTS_WAITING).set(now.num_waiting as f64);
        gauge!(names::KV_CACHE_USAGE_PERC).set(now.kv_usage);
        gauge!(names::KV_FREE_BLOCKS).set(now.kv_free_blocks as f64);
        gauge!(names::KV_CACHE_FRAGMENTATION_PERC).set(now.kv_fragmentation);
        let preemptions = now
            .num_preemptions
            .saturating_sub(self.last.num_preemptions);
        let queries = now
            .prefix_cache
            .queries
            .saturating_sub(self.last.prefix_cache.queries);
        let hits = now
            .prefix_cache
            .hits
            .saturating_sub(self.last.prefix_cache.hits);
        let window_freed = now
            .window_blocks_freed
            .saturating_sub(self.last.window_blocks_freed);
        if preemptions > 0 {
            counter!(names::NUM_PREEMPTIONS_TOTAL).increment(preemptions);
        }
        if queries > 0 {
            counter!(names::PREFIX_CACHE_QUERIES_TOTAL).increment(queries);
        }
        if hits > 0 {
            counter!(names::PREFIX_CACHE_HITS_TOTAL).increment(hits);
        }
        if window_freed > 0 {
            counter!(names::KV_WINDOW_BLOCKS_FREED_TOTAL).increment(window_freed);
        }
        self.last = *now;
    }
}

/// The engine's configured limits, published once when its core is created.
pub(crate) fn record_config(max_num_seqs: usize, num_kv_blocks: usize) {
    gauge!(names::MAX_NUM_SEQS).set(max_num_seqs as f64);
    gauge!(names::KV_NUM_BLOCKS).set(num_kv_blocks as f64);
    gauge!(names::KV_FREE_BLOCKS).set(num_kv_blocks as f64);
}

/// An idle KV check ran and passed (`ok`) or failed.
pub(crate) fn record_idle_check(ok: bool) {
    counter!(names::KV_IDLE_CHECKS_TOTAL).increment(1);
    if !ok {
        counter!(names::KV_IDLE_CHECK_FAILURES_TOTAL).increment(1);
    }
}

/// Tokens computed by one step.
pub(crate) fn record_iteration(tokens: usize) {
    histogram!(names::ITERATION_TOKENS_TOTAL).record(tokens as f64);
}

/// Where one step's time went: its forward pass and its sampling.
pub(crate) fn record_iteration_times(forward: Duration, sampling: Duration) {
    histogram!(names::ITERATION_FORWARD_SECONDS).record(forward.as_secs_f64());
    histogram!(names::ITERATION_SAMPLING_SECONDS).record(sampling.as_secs_f64());
}

/// The inference threads' busy time so far.
pub(crate) fn record_pool_busy(pool: PoolBusy) {
    gauge!(names::INFERENCE_POOL_BUSY_SECONDS).set(pool.busy.as_secs_f64());
    gauge!(names::INFERENCE_POOL_THREADS).set(pool.threads as f64);
}

/// A request was scheduled for the first time after waiting `queue`.
pub(crate) fn record_admitted(prompt_tokens: usize, queue: Duration) {
    counter!(names::PROMPT_TOKENS_TOTAL).increment(prompt_tokens as u64);
    histogram!(names::REQUEST_QUEUE_TIME_SECONDS).record(queue.as_secs_f64());
}

/// A token was generated: `ttft` for a request's first token, else the gap since the previous.
pub(crate) fn record_token(ttft: Option<Duration>, gap: Option<Duration>) {
    counter!(names::GENERATION_TOKENS_TOTAL).increment(1);
    if let Some(t) = ttft {
        histogram!(names::TIME_TO_FIRST_TOKEN_SECONDS).record(t.as_secs_f64());
    }
    if let Some(g) = gap {
        histogram!(names::INTER_TOKEN_LATENCY_SECONDS).record(g.as_secs_f64());
    }
}

/// A request with a first-token objective got its first token (`met`: within the objective),
/// or ended without one after the objective passed (`met` false).
pub(crate) fn record_slo_outcome(met: bool) {
    let name = if met {
        names::REQUESTS_SLO_MET_TOTAL
    } else {
        names::REQUESTS_SLO_MISSED_TOTAL
    };
    counter!(name).increment(1);
}

/// A request was refused at admission because its first-token objective could not be met.
pub(crate) fn record_slo_rejected() {
    counter!(names::REQUESTS_SLO_REJECTED_TOTAL).increment(1);
}

/// The engine failed a request with `failure`.
pub(crate) fn record_failed(failure: &EngineFailure) {
    counter!(names::REQUEST_FAILURES_TOTAL, "cause" => failure.kind()).increment(1);
}

/// A request finished (normally, or aborted by its client).
pub(crate) fn record_finished(reason: FinishReason, usage: &Usage, timings: &RequestTimings) {
    counter!(names::REQUEST_SUCCESS_TOTAL, "finished_reason" => reason.as_str()).increment(1);
    histogram!(names::E2E_REQUEST_LATENCY_SECONDS).record(timings.end_to_end.as_secs_f64());
    histogram!(names::REQUEST_PROMPT_TOKENS).record(usage.prompt_tokens as f64);
    histogram!(names::REQUEST_GENERATION_TOKENS).record(usage.completion_tokens as f64);
}

/// Publishes a mixture-of-experts model's routed-token counters: one
/// `kestrel:moe_expert_tokens_total{layer,expert}` counter per sparse layer and expert, whose
/// handles are registered once (so a step's publishing allocates nothing).
pub(crate) struct ExpertRecorder {
    counts: Arc<ExpertTokenCounts>,
    handles: Vec<Counter>,
    last: Vec<u64>,
}

impl ExpertRecorder {
    pub(crate) fn new(counts: Arc<ExpertTokenCounts>) -> ExpertRecorder {
        let experts = counts.experts();
        let handles = (0..counts.len())
            .map(|i| {
                let layer = counts.layers()[i / experts].to_string();
                let expert = (i % experts).to_string();
                counter!(names::MOE_EXPERT_TOKENS_TOTAL, "layer" => layer, "expert" => expert)
            })
            .collect();
        let last = vec![0; counts.len()];
        ExpertRecorder {
            counts,
            handles,
            last,
        }
    }

    /// Adds each counter's growth since the previous call.
    pub(crate) fn record(&mut self) {
        for (i, (handle, last)) in self.handles.iter().zip(&mut self.last).enumerate() {
            let now = self.counts.get(i);
            if now > *last {
                handle.increment(now - *last);
                *last = now;
            }
        }
    }
}
