//! The gateway: `kestrel serve`'s routes over a [`FleetBackend`]. It loads no weights: the
//! tokenizer, chat template and limits come from the model descriptor the workers announce in
//! Redis. Until one has, every route but `/metrics` and the playground page (`GET /`) answers
//! 503 with `Retry-After`. Every response carries `X-Request-Id` as on `kestrel serve`
//! ([`kestrel_server::request_id`]); the id travels in the job to the worker's logs.
//!
//! ```text
//! client ─► routes (validate, tokenize, render) ─► FleetBackend::submit ─► relay task
//!   relay: XADD {p}:requests:{band} ─► XREAD {p}:results:{id} ─► Splice ─► client's stream
//!   client gone: SET {p}:cancelled:{id} + PUBLISH {p}:cancel
//! registry: heartbeats + queue depths every 250 ms ─► admission, /health, gauges
//! ```

mod backend;
mod registry;
mod relay;
mod splice;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use kestrel_engine::constraint::ConstraintFactory;
use kestrel_server::error::{ApiError, OpenAiError};
use kestrel_server::{AppState, ServerConfig};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tower::ServiceExt;

pub use backend::FleetBackend;
pub use registry::{FleetView, Registry};

use crate::keys::Keys;
use crate::protocol::ModelDescriptor;
use crate::redis_io::{ensure_groups, Redis};
use crate::FleetError;

/// The gateway's fleet settings (its HTTP settings are a [`ServerConfig`]).
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub redis_url: String,
    pub keys: Keys,
    /// Untaken queued requests beyond which new ones get 429.
    pub max_queue_len: usize,
    /// A queued request fails after no worker has been alive this long.
    pub no_worker_timeout: Duration,
    /// How long cancellation markers (and result streams) live.
    pub result_ttl: Duration,
    /// Abort requests that have not started within this time (passed to the workers).
    pub max_queue_time: Option<Duration>,
    /// Most urgent `priority` a client may ask for (lower runs first); default 0.
    pub min_client_priority: i32,
}

impl GatewayConfig {
    /// Defaults on `redis_url`: queue limit 1024, 30 s without workers, 10 minute TTLs.
    pub fn new(redis_url: &str) -> GatewayConfig {
        GatewayConfig {
            redis_url: redis_url.to_string(),
            keys: Keys::default(),
            max_queue_len: 1024,
            no_worker_timeout: Duration::from_secs(30),
            result_ttl: Duration::from_secs(600),
            max_queue_time: None,
            min_client_priority: 0,
        }
    }
}

/// What the gateway's tasks share.
pub(crate) struct GatewayShared {
    config: GatewayConfig,
    keys: Keys,
    redis: Redis,
    registry: Arc<Registry>,
    descriptor: OnceLock<ModelDescriptor>,
    /// Compiles structured-output grammars against the workers' model, so a bad schema is a
    /// 400 at the gateway (unset: the model's vocabulary cannot be constrained).
    constraints: OnceLock<Arc<ConstraintFactory>>,
    gateway_id: String,
    next_id: AtomicU64,
    active: AtomicUsize,
    stopping: AtomicBool,
}

impl GatewayShared {
    fn finished(&self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Connects to Redis and serves on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    http: ServerConfig,
    config: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), FleetError> {
    let metrics = kestrel_server::metrics::install_recorder()
        .map_err(|e| FleetError::Model(e.to_string()))?;
    crate::metrics::describe();
    let redis = Redis::connect(&config.redis_url, Duration::from_secs(30)).await?;
    ensure_groups(&redis, &config.keys).await?;
    let shared = Arc::new(GatewayShared {
        keys: config.keys.clone(),
        redis: redis.clone(),
        registry: Arc::new(Registry::default()),
        descriptor: OnceLock::new(),
        constraints: OnceLock::new(),
        gateway_id: gateway_id(),
        next_id: AtomicU64::new(0),
        active: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
        config,
    });
    let model_of = {
        let shared = shared.clone();
        Arc::new(move || shared.descriptor.get().map(|d| d.model_id.clone()))
    };
    let registry = tokio::spawn(
        shared
            .registry
            .clone()
            .run(redis, shared.keys.clone(), model_of),
    );
    let backend = Arc::new(FleetBackend {
        shared: shared.clone(),
        runtime: tokio::runtime::Handle::current(),
    });
    let routes: Arc<OnceLock<Router>> = Arc::new(OnceLock::new());
    let loader = tokio::spawn(load_routes(
        shared.clone(),
        backend.clone(),
        http.clone(),
        metrics.clone(),
        routes.clone(),
    ));
    // The request id is assigned out here too, so that the 503s before the model is known
    // carry one; the routes' own `assign` keeps it.
    let app = Router::new()
        .fallback_service(tower::service_fn(move |req: Request| {
            let routes = routes.get().cloned();
            let metrics = metrics.clone();
            async move { Ok::<_, std::convert::Infallible>(dispatch(routes, metrics, req).await) }
        }))
        .layer(axum::middleware::from_fn(
            kestrel_server::request_id::assign,
        ));
    let served = kestrel_server::serve_app(listener, app, backend, &http, shutdown).await;
    registry.abort();
    loader.abort();
    served.map_err(|e| FleetError::Serve(e.to_string()))
}

/// The full routes once the model is known; before that, 503 (and `/metrics`, the playground).
async fn dispatch(routes: Option<Router>, metrics: PrometheusHandle, req: Request) -> Response {
    if let Some(router) = routes {
        return match router.oneshot(req).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
    }
    if req.uri().path() == "/metrics" {
        return kestrel_server::metrics::render_with(&metrics, None).into_response();
    }
    // The playground page loads (and shows the 503s of the API) before the model is known.
    if let Some(page) = kestrel_server::routes::playground::respond(req.method(), req.uri().path())
    {
        return page;
    }
    // Unavailable errors carry `Retry-After`.
    OpenAiError(ApiError::Unavailable(
        "no inference worker has announced a model yet; retry later".into(),
    ))
    .into_response()
}

/// Waits for a worker's model descriptor, then builds the routes over it.
async fn load_routes(
    shared: Arc<GatewayShared>,
    backend: Arc<FleetBackend>,
    http: ServerConfig,
    metrics: PrometheusHandle,
    routes: Arc<OnceLock<Router>>,
) {
    loop {
        match fetch_descriptor(&shared).await {
            Ok(Some(d)) => match crate::descriptor::model_info(&d) {
                Ok(model) => {
                    let limits = crate::descriptor::limits(&d, &shared.config);
                    tracing::info!(model = %d.model_id, "serving the workers' model");
                    let width = d.request_limits.vocab_size;
                    if let Some(f) = kestrel_server::constraint::factory(&model.tokenizer, width) {
                        let _ = shared.constraints.set(f);
                    }
                    let _ = shared.descriptor.set(d);
                    let state = AppState::new(backend, model, limits, metrics);
                    let _ = routes.set(kestrel_server::routes::router(&http, state));
                    return;
                }
                Err(e) => tracing::error!(error = %e, "the announced model is unusable"),
            },
            Ok(None) => tracing::info!("waiting for a worker to announce its model"),
            Err(e) => tracing::warn!(error = %e, "cannot read the model descriptor"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn fetch_descriptor(shared: &GatewayShared) -> Result<Option<ModelDescriptor>, FleetError> {
    let mut conn = shared.redis.conn();
    let json: Option<String> = redis::cmd("GET")
        .arg(shared.keys.model())
        .query_async(&mut conn)
        .await?;
    json.map(|j| serde_json::from_str(&j).map_err(FleetError::from))
        .transpose()
}

/// A name for this gateway's request ids, unique across restarts and replicas.
fn gateway_id() -> String {
    format!(
        "g{:08x}{:04x}",
        crate::protocol::unix_ms() & 0xffff_ffff,
        rand::random::<u16>()
    )
}
