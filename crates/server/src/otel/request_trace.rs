//! [`RequestTrace`]: a traced request's root span, and the [`trace_requests`] middleware that
//! opens it from the client's `traceparent`.
//!
//! The root span is shared: the middleware holds it for the handler, a generation request's
//! tally ([`crate::request_log::Tally`]) until the last byte of its answer, a worker's job
//! until the job ends. The span ends when the last holder drops it, so a streamed answer's
//! root span covers the whole stream.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use kestrel_engine::trace_parent::TraceParent;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue};

/// The request header that carries the client's trace context.
pub const TRACEPARENT: &str = "traceparent";

tokio::task_local! {
    static CURRENT: RequestTrace;
}

/// A traced request's root span (cheap to clone; it ends when the last clone drops).
#[derive(Clone)]
pub struct RequestTrace {
    cx: Context,
}

impl std::fmt::Debug for RequestTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestTrace({})", self.traceparent())
    }
}

impl RequestTrace {
    /// A root span `name` from `start`, a child of `parent` (else the root of a new trace);
    /// `None` when traces are not exported.
    pub fn start(
        name: String,
        kind: SpanKind,
        start: Instant,
        parent: Option<TraceParent>,
        attributes: Vec<KeyValue>,
    ) -> Option<RequestTrace> {
        let tracer = super::tracer()?;
        let parent_cx = match parent {
            Some(p) => Context::new().with_remote_span_context(span_context(p)),
            None => Context::new(),
        };
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(super::wall(start))
            .with_attributes(attributes)
            .start_with_context(tracer, &parent_cx);
        Some(RequestTrace {
            cx: parent_cx.with_span(span),
        })
    }

    /// The trace of the request this task serves, if it is traced.
    pub fn current() -> Option<RequestTrace> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// This span as the parent of work done elsewhere (the engine, a worker).
    pub fn traceparent(&self) -> TraceParent {
        let span = self.cx.span();
        let sc = span.span_context();
        TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            parent_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8(),
        }
    }

    /// A child span `name` that ran from `start` to `end`.
    pub fn child(&self, name: &'static str, start: Instant, end: Instant, attrs: Vec<KeyValue>) {
        let Some(tracer) = super::tracer() else {
            return;
        };
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(super::wall(start))
            .with_attributes(attrs)
            .start_with_context(tracer, &self.cx);
        span.end_with_timestamp(super::wall(end.max(start)));
    }

    /// Sets `attr` on the root span.
    pub fn set_attribute(&self, attr: KeyValue) {
        self.cx.span().set_attribute(attr);
    }
}

/// The OpenTelemetry span context of `parent`, as a remote parent.
pub(super) fn span_context(parent: TraceParent) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.parent_id),
        TraceFlags::new(parent.flags),
        true,
        TraceState::default(),
    )
}

/// Middleware: serves each request (but health checks and scrapes) in a root span named after
/// its method and route, a child of the client's `traceparent` when it sends a valid one,
/// with the request's id as `kestrel.request_id`. Does nothing when traces are not exported.
pub async fn trace_requests(req: Request, next: Next) -> Response {
    if !super::enabled() {
        return next.run(req).await;
    }
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
    if route.starts_with("/health") || route == "/metrics" {
        return next.run(req).await;
    }
    let parent = req
        .headers()
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| TraceParent::parse(v).ok());
    let method = req.method().to_string();
    let mut attrs = vec![
        KeyValue::new("http.request.method", method.clone()),
        KeyValue::new("http.route", route.clone()),
    ];
    if let Some(id) = crate::request_id::current_string() {
        attrs.push(KeyValue::new("kestrel.request_id", id));
    }
    let start = crate::request_id::arrived().unwrap_or_else(Instant::now);
    let name = format!("{method} {route}");
    let Some(trace) = RequestTrace::start(name, SpanKind::Server, start, parent, attrs) else {
        return next.run(req).await;
    };
    let response = CURRENT.scope(trace.clone(), next.run(req)).await;
    trace.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    ));
    response
}
