//! The worker's span of a traced job: `worker job`, a child of the gateway's span named by the
//! job's `traceparent`, from the moment the gateway queued the job to its end, with a
//! `redis queue` child for the wait until this worker took it. The engine's steps of the job
//! are its children too ([`kestrel_server::otel::spawn_step_spans`]).

use std::time::{Duration, Instant};

use kestrel_engine::trace_parent::TraceParent;
use kestrel_server::otel::RequestTrace;
use opentelemetry::trace::SpanKind;
use opentelemetry::KeyValue;

use crate::protocol::{unix_ms, Job};

/// Waits in Redis longer than this are not believed (clocks of different machines differ).
const MAX_BELIEVED_WAIT: Duration = Duration::from_secs(3600);

/// The span of `job` (its `attempt`-th run), taken now; `None` when the job is not traced
/// or traces are not exported. The span ends when the returned value is dropped.
pub fn start(job: &Job, attempt: u32) -> Option<RequestTrace> {
    let parent = TraceParent::parse(job.traceparent.as_deref()?).ok()?;
    let taken = Instant::now();
    let waited = Duration::from_millis(unix_ms().saturating_sub(job.queued_at_ms));
    let queued = taken
        .checked_sub(waited.min(MAX_BELIEVED_WAIT))
        .unwrap_or(taken);
    let mut attrs = vec![
        KeyValue::new("kestrel.job", job.id.clone()),
        KeyValue::new("kestrel.attempt", i64::from(attempt)),
    ];
    if let Some(id) = &job.request_id {
        attrs.push(KeyValue::new("kestrel.request_id", id.clone()));
    }
    let trace = RequestTrace::start(
        "worker job".to_string(),
        SpanKind::Consumer,
        queued,
        Some(parent),
        attrs,
    )?;
    trace.child("redis queue", queued, taken, Vec::new());
    Some(trace)
}
