//! Prometheus metrics: the process-wide recorder, the HTTP request counter and the scrape.
//!
//! The engine records `kestrel:*` series through the `metrics` facade; this module installs the
//! recorder they land in (once per process) with histogram buckets for every `kestrel:`
//! histogram, so `histogram_quantile` works on latencies (seconds) and token counts alike.
//! The server adds:
//!
//! * `kestrel:http_requests_total{route,status}` — every routed request;
//! * `kestrel:http_request_duration_seconds{route}` — time to the response head;
//! * `kestrel:http_e2e_request_latency_seconds{route,model_name}` — end-to-end latency of a
//!   generation request as its client sees it: arrival of the request to the last byte of its
//!   answer (the last SSE frame of a stream), recorded once per request whether it finished,
//!   failed or the client went away (vLLM's `e2e_request_latency_seconds`, measured at the
//!   HTTP front door — `serve` or the gateway — rather than in the engine);
//! * the standard `process_*` set (Prometheus' client convention): `process_cpu_seconds_total`,
//!   `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_threads`,
//!   `process_open_fds`, `process_max_fds`, `process_start_time_seconds`, read from the OS at
//!   each scrape, on `serve`, the gateway and workers alike;
//! * the heap: `kestrel:heap_held_bytes` (what the C allocator got from the system),
//!   `kestrel:heap_live_bytes` (what of it is allocated) and `kestrel:heap_fragmentation_perc`
//!   (`(held - live) / held`, free memory the allocator keeps), read from the allocator at each
//!   scrape (see [`kestrel_kernels::heap_stats`]).

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use kestrel_engine::api::EngineStats;
use metrics::{KeyName, Metadata, SharedString, Unit};
use metrics_exporter_prometheus::{
    BuildError, Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::state::AppState;

/// Counter: routed HTTP requests by route template and status code.
pub const HTTP_REQUESTS_TOTAL: &str = "kestrel:http_requests_total";
/// Histogram (seconds): request arrival to response head, by route.
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "kestrel:http_request_duration_seconds";

/// Histogram (seconds): a generation request's arrival to the end of its answer, by route
/// and served model name.
pub const HTTP_E2E_REQUEST_LATENCY_SECONDS: &str = "kestrel:http_e2e_request_latency_seconds";

/// Gauge (bytes): memory the C allocator holds from the system.
pub const HEAP_HELD_BYTES: &str = "kestrel:heap_held_bytes";
/// Gauge (bytes): memory in allocated chunks.
pub const HEAP_LIVE_BYTES: &str = "kestrel:heap_live_bytes";
/// Gauge (0..1): `(held - live) / held`.
pub const HEAP_FRAGMENTATION_PERC: &str = "kestrel:heap_fragmentation_perc";

/// Bucket bounds shared by all `kestrel:` histograms: they span milliseconds to minutes for
/// latencies and 1 to 10k for token counts.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1280.0, 2560.0, 5120.0, 10240.0,
];

/// Why the recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the Prometheus recorder: {0}")]
pub struct MetricsError(String);

static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
/// The process's recorder, shared with the [`labelled_recorder`]s of its engines.
static RECORDER: OnceLock<Arc<PrometheusRecorder>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (first call) and returns its handle (every
/// call). Call it before starting the engine so that the engine's metric handles bind to it.
pub fn install_recorder() -> Result<PrometheusHandle, MetricsError> {
    HANDLE
        .get_or_init(|| {
            let handle = build()?;
            kestrel_engine::metrics::describe();
            process_collector().describe();
            kestrel_engine::lora_metrics::describe();
            crate::model_registry::describe_metrics();
            metrics::describe_counter!(
                HTTP_REQUESTS_TOTAL,
                metrics::Unit::Count,
                "HTTP requests by route and status"
            );
            describe_heap();
            metrics::describe_histogram!(
                HTTP_REQUEST_DURATION_SECONDS,
                metrics::Unit::Seconds,
                "Time from request arrival to response head"
            );
            metrics::describe_histogram!(
                HTTP_E2E_REQUEST_LATENCY_SECONDS,
                metrics::Unit::Seconds,
                "Generation request arrival to the end of its answer, as the client sees it"
            );
            Ok(handle)
        })
        .clone()
        .map_err(MetricsError)
}

fn build() -> Result<PrometheusHandle, String> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Prefix("kestrel:".into()), BUCKETS)
        .map_err(|e: BuildError| e.to_string())?
        .build_recorder();
    let handle = recorder.handle();
    let recorder = Arc::new(recorder);
    metrics::set_global_recorder(recorder.clone()).map_err(|e| e.to_string())?;
    let _ = RECORDER.set(recorder);
    Ok(handle)
}

/// A recorder that adds `model_name="<model>"` to every series recorded through it (vLLM's
/// label), on top of the process's Prometheus recorder: an engine thread of a server of
/// several models records through one. `None` before [`install_recorder`] ran.
pub fn labelled_recorder(model: &str) -> Option<kestrel_engine::handle::MetricsRecorder> {
    let inner = RECORDER.get()?.clone();
    Some(Arc::new(Labelled {
        inner,
        labels: vec![metrics::Label::new("model_name", model.to_string())],
    }))
}

/// [`labelled_recorder`]'s recorder.
struct Labelled {
    inner: Arc<PrometheusRecorder>,
    labels: Vec<metrics::Label>,
}

impl Labelled {
    fn key(&self, key: &metrics::Key) -> metrics::Key {
        key.with_extra_labels(self.labels.clone())
    }
}

impl metrics::Recorder for Labelled {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &metrics::Key, metadata: &Metadata<'_>) -> metrics::Counter {
        self.inner.register_counter(&self.key(key), metadata)
    }

    fn register_gauge(&self, key: &metrics::Key, metadata: &Metadata<'_>) -> metrics::Gauge {
        self.inner.register_gauge(&self.key(key), metadata)
    }

    fn register_histogram(
        &self,
        key: &metrics::Key,
        metadata: &Metadata<'_>,
    ) -> metrics::Histogram {
        self.inner.register_histogram(&self.key(key), metadata)
    }
}

/// Middleware: counts each routed request by route template and status.
pub async fn count_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let start = Instant::now();
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(HTTP_REQUESTS_TOTAL, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!(HTTP_REQUEST_DURATION_SECONDS, "route" => route)
        .record(start.elapsed().as_secs_f64());
    response
}

/// The Prometheus text exposition, with the engine gauges refreshed from its latest stats
/// (when the engine runs in this process).
pub fn render(state: &AppState) -> String {
    render_with(state.metrics(), state.backend().engine_stats())
}

/// The exposition of `handle`, with the engine gauges set from `stats` first.
pub fn render_with(handle: &PrometheusHandle, stats: Option<EngineStats>) -> String {
    use kestrel_engine::metrics::names;
    if let Some(stats) = stats {
        metrics::gauge!(names::NUM_REQUESTS_RUNNING).set(stats.running as f64);
        metrics::gauge!(names::NUM_REQUESTS_WAITING).set(stats.waiting as f64);
        metrics::gauge!(names::KV_CACHE_USAGE_PERC).set(stats.kv_usage);
        metrics::gauge!(names::KV_FREE_BLOCKS).set(stats.kv_free_blocks as f64);
        metrics::gauge!(names::KV_CACHE_FRAGMENTATION_PERC).set(stats.kv_fragmentation);
    }
    process_collector().collect();
    record_heap();
    handle.run_upkeep();
    handle.render()
}

/// Sets the heap gauges from the allocator's totals (where the C library reports them).
fn record_heap() {
    if let Some(heap) = kestrel_kernels::heap_stats::heap_stats() {
        metrics::gauge!(HEAP_HELD_BYTES).set(heap.held as f64);
        metrics::gauge!(HEAP_LIVE_BYTES).set(heap.live as f64);
        metrics::gauge!(HEAP_FRAGMENTATION_PERC).set(heap.fragmentation());
    }
}

fn describe_heap() {
    use metrics::{describe_gauge, Unit};
    describe_gauge!(
        HEAP_HELD_BYTES,
        Unit::Bytes,
        "Memory the C allocator holds from the system"
    );
    describe_gauge!(
        HEAP_LIVE_BYTES,
        Unit::Bytes,
        "Memory in allocated heap chunks"
    );
    describe_gauge!(
        HEAP_FRAGMENTATION_PERC,
        Unit::Percent,
        "Free memory the allocator keeps over the memory it holds, (held - live) / held (0..1)"
    );
}

/// The process metrics' reader (one per process).
fn process_collector() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}
