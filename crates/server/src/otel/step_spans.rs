//! [`spawn_step_spans`]: turns an engine's traced steps ([`kestrel_engine::step_trace`]) into
//! `prefill` and `decode` spans under each request's parent, on a task of its own.

use kestrel_engine::handle::EngineHandle;
use kestrel_engine::step_trace::StepTrace;
use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

/// Steps waiting to become spans; the engine drops steps beyond it rather than wait.
const STEP_CAPACITY: usize = 4096;

/// Watches `engine`'s traced steps and exports them as spans, on a thread of its own that
/// ends with the engine (nothing when traces are not exported).
pub fn spawn_step_spans(engine: &EngineHandle) {
    if !super::enabled() {
        return;
    }
    let mut steps = engine.watch_steps(STEP_CAPACITY);
    let spawned = std::thread::Builder::new()
        .name("kestrel-step-spans".into())
        .spawn(move || {
            while let Some(step) = steps.blocking_recv() {
                emit(&step);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the thread that traces engine steps: {e}");
    }
}

/// One span per traced sequence of `step`, from the step's start to its end.
fn emit(step: &StepTrace) {
    let Some(tracer) = super::tracer() else {
        return;
    };
    let (start, end) = (super::wall(step.start), super::wall(step.end));
    for seq in &step.seqs {
        let parent =
            Context::new().with_remote_span_context(super::request_trace::span_context(seq.trace));
        let name = if seq.prefill { "prefill" } else { "decode" };
        let attrs = [
            KeyValue::new("kestrel.engine_request", seq.request as i64),
            KeyValue::new("kestrel.step.tokens", seq.tokens as i64),
            KeyValue::new("kestrel.step.batch_seqs", step.batch_seqs as i64),
        ];
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes(attrs)
            .start_with_context(tracer, &parent);
        span.end_with_timestamp(end);
    }
}
