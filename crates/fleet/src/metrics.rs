//! The gateway's own metrics (the workers export their engines' `kestrel:*` series).

/// Gauge, labelled `priority` (high, normal, low): entries in Redis no worker has taken yet.
pub const QUEUE_DEPTH: &str = "kestrel:gateway_queue_depth";
/// Gauge: workers whose heartbeat is current.
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
        "Workers with a current heartbeat"
    );
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
