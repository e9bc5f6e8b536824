//! One structured log line per request (target `kestrel::request`).
//!
//! Generation routes keep a [`Tally`] of their choices' usage and timings; it logs when dropped,
//! so a request logs exactly once whether it finished, failed or the client went away. Every
//! other response (including generation requests rejected before they ran) is logged by the
//! [`log_requests`] middleware, which skips responses marked [`LoggedByHandler`].
//!
//! Both lines carry the request's `request_id` ([`crate::request_id`]); generation lines also
//! carry `engine_ids`, the engine's ids of the request's choices, which the engine's own log
//! lines name as `request`. Everything the handler logs runs in a `request` span with the same
//! `request_id`.

use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use kestrel_engine::api::{EngineEvent, Usage};
use opentelemetry::KeyValue;
use tracing::Instrument;

use crate::otel::RequestTrace;

use crate::request_id::RequestId;
use crate::usage::UsageTotal;

/// Response extension: the handler's [`Tally`] logs this request.
#[derive(Debug, Clone, Copy)]
pub struct LoggedByHandler;

/// Marks `response` as logged by its handler.
pub fn mark_logged(mut response: Response) -> Response {
    response.extensions_mut().insert(LoggedByHandler);
    response
}

/// Accumulates a generation request's outcome and logs it once, on drop.
#[derive(Debug)]
pub struct Tally {
    route: &'static str,
    /// The served model's name (the latency histogram's `model_name`).
    model: String,
    start: Instant,
    usage: UsageTotal,
    queue: Duration,
    ttft: Option<Duration>,
    finish: Vec<&'static str>,
    error: Option<String>,
    choices: usize,
    status: u16,
    /// Set when the request was refused before it ran: the middleware logs the response.
    quiet: bool,
    request_id: Option<RequestId>,
    engine_ids: Vec<u64>,
    /// When the choices were submitted (validation ended).
    submitted: Instant,
    /// The request's root span, when traces are exported.
    trace: Option<RequestTrace>,
}

impl Tally {
    /// A tally for `choices` engine requests on `route`, logged with the current request's
    /// id.
    pub fn new(route: &'static str, prompt_tokens: usize, choices: usize) -> Tally {
        Tally {
            route,
            model: String::new(),
            start: crate::request_id::arrived().unwrap_or_else(Instant::now),
            usage: UsageTotal::new(prompt_tokens),
            queue: Duration::ZERO,
            ttft: None,
            finish: Vec::new(),
            error: None,
            choices,
            status: 200,
            quiet: false,
            request_id: RequestId::current(),
            engine_ids: Vec::new(),
            submitted: Instant::now(),
            trace: RequestTrace::current(),
        }
        .traced_validation(prompt_tokens)
    }

    /// Records the `validate` span (arrival to submission) of a traced request.
    fn traced_validation(self, prompt_tokens: usize) -> Tally {
        if let Some(trace) = &self.trace {
            let tokens = KeyValue::new("kestrel.prompt_tokens", prompt_tokens as i64);
            trace.child("validate", self.start, self.submitted, vec![tokens]);
        }
        self
    }

    /// Records the `queue` and `stream` spans of a traced request, and its outcome on the root
    /// span.
    fn trace_end(&self, outcome: &'static str, usage: &Usage) {
        let Some(trace) = &self.trace else { return };
        let now = Instant::now();
        if !self.finish.is_empty() {
            trace.child(
                "queue",
                self.submitted,
                self.submitted + self.queue,
                Vec::new(),
            );
        }
        if let Some(ttft) = self.ttft {
            let tokens = KeyValue::new("kestrel.completion_tokens", usage.completion_tokens as i64);
            trace.child("stream", self.start + ttft, now, vec![tokens]);
        }
        trace.set_attribute(KeyValue::new("kestrel.outcome", outcome));
        trace.set_attribute(KeyValue::new("gen_ai.request.model", self.model.clone()));
    }

    /// Names the served model the request ran on (labels its latency).
    pub fn for_model(mut self, model: &str) -> Tally {
        self.model = model.to_string();
        self
    }

    /// Records the engine's ids of the choices (logged as `engine_ids`).
    pub fn set_engine_ids(&mut self, ids: Vec<u64>) {
        self.engine_ids = ids;
    }

    /// Records an event of any choice.
    pub fn observe(&mut self, event: &EngineEvent) {
        match event {
            EngineEvent::Token(_) => {
                self.ttft.get_or_insert_with(|| self.start.elapsed());
            }
            EngineEvent::Finished {
                reason,
                usage,
                timings,
                ..
            } => {
                self.usage.add(usage);
                self.queue = self.queue.max(timings.queue);
                self.finish.push(reason.as_str());
            }
            EngineEvent::Failed(f) => self.error = Some(f.to_string()),
        }
    }

    /// Usage of the choices finished so far (the prompt counted once).
    pub fn usage(&self) -> Usage {
        self.usage.get()
    }

    /// Records the HTTP status the request ended with (default 200).
    pub fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    /// Drops the tally without logging (the request was refused at admission; the middleware
    /// logs its error response).
    pub fn discard(mut self) {
        self.quiet = true;
    }

    /// Whether every choice has finished or one failed.
    pub fn done(&self) -> bool {
        self.error.is_some() || self.finish.len() >= self.choices
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if self.quiet {
            return;
        }
        let outcome = match (&self.error, self.done()) {
            (Some(_), _) => "failed",
            (None, true) => {
                crate::throughput::record_completion();
                "finished"
            }
            (None, false) => "cancelled",
        };
        let e2e = self.start.elapsed();
        metrics::histogram!(
            crate::metrics::HTTP_E2E_REQUEST_LATENCY_SECONDS,
            "route" => self.route,
            "model_name" => self.model.clone()
        )
        .record(e2e.as_secs_f64());
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let usage = self.usage.get();
        self.trace_end(outcome, &usage);
        let engine_ids = self
            .engine_ids
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        // Outside any span: a streamed request's tally drops after its handler returned, and
        // the line names its request id itself.
        tracing::info!(
            target: "kestrel::request",
            parent: None,
            request_id = self.request_id.as_ref().map(RequestId::as_str),
            engine_ids,
            route = self.route,
            status = self.status,
            outcome,
            prompt_tokens = usage.prompt_tokens,
            completion_tokens = usage.completion_tokens,
            cached_tokens = usage.cached_tokens,
            queue_ms = ms(self.queue),
            ttft_ms = self.ttft.map(ms),
            e2e_ms = ms(e2e),
            finish_reason = self.finish.join(","),
            error = self.error.as_deref(),
            "request"
        );
    }
}

/// Middleware: runs the handler in a `request` span and logs responses the handler did not
/// log itself.
pub async fn log_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
    let method = req.method().clone();
    let request_id = req.extensions().get::<RequestId>().cloned();
    let id = request_id.as_ref().map(RequestId::as_str);
    let span = tracing::info_span!("request", request_id = id);
    let start = Instant::now();
    let response = next.run(req).instrument(span).await;
    if response.extensions().get::<LoggedByHandler>().is_none() {
        tracing::info!(
            target: "kestrel::request",
            request_id = id,
            route,
            method = %method,
            status = response.status().as_u16(),
            e2e_ms = start.elapsed().as_secs_f64() * 1e3,
            "request"
        );
    }
    response
}
