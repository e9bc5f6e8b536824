//! The gateway's own metrics (the workers export their engines' `kestrel:*` series).

/// Gauge, labelled `priority` (high, normal, low) and `model_name`: entries in Redis no worker
/// has taken yet.
pub const QUEUE_DEPTH: &str = "kestrel:gateway_queue_depth";
/// Gauge, labelled `model_name`: workers of the model's identity whose heartbeat is current.
pub const LIVE_WORKERS: &str = "kestrel:gateway_live_workers";
/// Counter: jobs run again because their worker died (counted by the gateway that sees the
/// re-run start, and by the worker that claims the job).
pub const REDELIVERIES_TOTAL: &str = "kestrel:gateway_redeliveries_total";
/// Counter, labelled `reason` (queue_full, no_workers): requests refused before queueing.
pub const REQUESTS_REJECTED_TOTAL: &str = "kestrel:gateway_requests_rejected_total";
/// Histogram (seconds): from queueing to the first token reaching the client.
pub const TIME_TO_FIRST_TOKEN_SECONDS: &str = "kestrel:gateway_time_to_first_token_seconds";
/// Histogram (seconds): from queueing to the request's end, as the client sees it.
pub const E2E_REQUEST_LATENCY_SECONDS: &str = "kestrel:gateway_e2e_request_latency_seconds";

/// Counter, labelled `decision` (cache_hit, shared, fallback): where requests were queued
/// (see [`crate::gateway::routing`]).
pub const ROUTED_REQUESTS_TOTAL: &str = "kestrel:gateway_routed_requests_total";
/// Counter: prompt tokens the worker a request was routed to already held in its prefix
/// cache (by the gateway's index).
pub const MATCHED_PREFIX_TOKENS_TOTAL: &str = "kestrel:gateway_matched_prefix_tokens_total";
/// Gauge: distinct prefix-cache blocks in the gateway's routing index.
pub const PREFIX_INDEX_BLOCKS: &str = "kestrel:gateway_prefix_index_blocks";
/// Gauge: workers with at least one block in the gateway's routing index.
pub const PREFIX_INDEX_WORKERS: &str = "kestrel:gateway_prefix_index_workers";

/// Gauge, labelled `model_name`: live workers announcing the name with another identity
/// than the one the fleet serves it as (refused; they take no job).
pub const REFUSED_WORKERS: &str = "kestrel:gateway_refused_workers";
/// Counter (worker): queue entries prepared for another model identity, refused unrun.
pub const WORKER_FOREIGN_JOBS_TOTAL: &str = "kestrel:worker_foreign_jobs_total";
/// Gauge (worker): 1 while the fleet serves this worker's name as another identity.
pub const WORKER_MODEL_REFUSED: &str = "kestrel:worker_model_refused";

/// Registers the worker's help text and units with the installed recorder.
pub fn describe_worker() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(
        WORKER_FOREIGN_JOBS_TOTAL,
        Unit::Count,
        "Queue entries prepared for another model identity, refused without running"
    );
    describe_gauge!(
        WORKER_MODEL_REFUSED,
        Unit::Count,
        "1 while the fleet serves this worker's model name as another identity"
    );
    metrics::gauge!(WORKER_MODEL_REFUSED).set(0.0);
    metrics::counter!(WORKER_FOREIGN_JOBS_TOTAL).increment(0);
}

/// Registers help text and units with the installed recorder.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_gauge!(
        QUEUE_DEPTH,
        Unit::Count,
        "Queued requests no worker has taken yet, by priority band"
    );
    describe_gauge!(
        LIVE_WORKERS,
        Unit::Count,
        "Workers with a current heartbeat serving the model, by model"
    );
    describe_gauge!(
        REFUSED_WORKERS,
        Unit::Count,
        "Live workers refused for announcing a served name with another model identity"
    );
    describe_counter!(
        ROUTED_REQUESTS_TOTAL,
        Unit::Count,
        "Requests queued, by routing decision (cache_hit, balanced, shared, fallback, adapter)"
    );
    describe_counter!(
        MATCHED_PREFIX_TOKENS_TOTAL,
        Unit::Count,
        "Prompt tokens already cached on the worker a request was routed to"
    );
    describe_gauge!(
        PREFIX_INDEX_BLOCKS,
        Unit::Count,
        "Distinct prefix-cache blocks in the routing index"
    );
    describe_gauge!(
        PREFIX_INDEX_WORKERS,
        Unit::Count,
        "Workers with blocks in the routing index"
    );
    for decision in ["cache_hit", "shared", "fallback"] {
        metrics::counter!(ROUTED_REQUESTS_TOTAL, "decision" => decision).increment(0);
    }
    metrics::counter!(MATCHED_PREFIX_TOKENS_TOTAL).increment(0);
    metrics::gauge!(PREFIX_INDEX_BLOCKS).set(0.0);
    metrics::gauge!(PREFIX_INDEX_WORKERS).set(0.0);
    describe_counter!(
        REDELIVERIES_TOTAL,
        Unit::Count,
        "Requests re-run after their worker died"
    );
    describe_counter!(
        REQUESTS_REJECTED_TOTAL,
        Unit::Count,
        "Requests refused before queueing, by reason"
    );
    describe_histogram!(
        TIME_TO_FIRST_TOKEN_SECONDS,
        Unit::Seconds,
        "Queueing to first token at the gateway"
    );
    describe_histogram!(
        E2E_REQUEST_LATENCY_SECONDS,
        Unit::Seconds,
        "Queueing to end of request at the gateway"
    );
}
