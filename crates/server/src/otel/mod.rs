//! OpenTelemetry traces (`--otlp-traces-endpoint`): spans of each request, exported over
//! OTLP/HTTP (protobuf) to a collector.
//!
//! A request's trace, from the client's `traceparent` (W3C Trace Context) when it sends one:
//!
//! ```text
//! POST /v1/chat/completions           the HTTP handler: arrival to the last byte (server)
//! ├─ validate                         template, tokenize, check lengths and parameters
//! ├─ queue                            submitted to scheduled (serve: the engine's queue;
//! │                                   gateway: Redis and the worker's engine queue)
//! ├─ prefill / decode                 each engine step the request takes part in (serve)
//! ├─ worker job                       (gateway + worker) the worker's part, from the
//! │  ├─ redis queue                   traceparent carried in the Redis job: queued to taken,
//! │  └─ prefill / decode              and its engine's steps
//! └─ stream                           first token to the end: detokenized text streamed out
//! ```
//!
//! Spans are built with explicit start and end times from instants the request already
//! records, and engine steps reach this module through a bounded channel
//! ([`kestrel_engine::step_trace`]): the engine thread never builds a span. With no endpoint
//! configured no tracer is installed, and every hook here returns at its first check.

mod exporter;
mod request_trace;
mod step_spans;

use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use opentelemetry_sdk::trace::SdkTracer;

pub use exporter::{install, OtlpError, TraceExport};
pub use request_trace::{trace_requests, RequestTrace};
pub use step_spans::spawn_step_spans;

/// The process's tracer, once [`install`] ran.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The tracer, when traces are exported.
pub fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

/// Whether traces are exported.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// The wall-clock time of `t` (spans carry wall-clock times; the code measures instants).
pub fn wall(t: Instant) -> SystemTime {
    let (now, wall_now) = (Instant::now(), SystemTime::now());
    match now.checked_duration_since(t) {
        Some(ago) => wall_now - ago,
        None => wall_now + t.duration_since(now),
    }
}
