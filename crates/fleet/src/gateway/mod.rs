//! The gateway: `kestrel serve`'s routes over a [`FleetBackend`] per served model. It loads
//! no weights: each model's tokenizer, chat template and limits come from the descriptor its
//! workers announce in Redis. Until one has, every route but `/metrics` and the playground page
//! (`GET /`) answers 503 with `Retry-After`. Every response carries `X-Request-Id` as on
//! `kestrel serve` ([`kestrel_server::request_id`]); the id travels in the job to the worker's
//! logs.
//!
//! ```text
//! client ─► dispatch (by `model`) ─► that model's routes (validate, tokenize, render)
//!   ─► FleetBackend::submit ─► routing (which stream) ─► relay task
//!   relay: XADD {p}:requests:{model}[:worker:{id}]:{band} ─► XREAD {p}:results:{id}
//!          ─► Splice ─► client
//!   client gone: SET {p}:cancelled:{id} + PUBLISH {p}:cancel
//! registry: heartbeats, name bindings, queue depths every 250 ms ─► admission, /health, gauges
//! models:   each bound name's descriptor ─► its routes (rebuilt when the binding changes)
//! passes:   embeddings and prompt logprobs as one-pass jobs on the shared stream ─► one answer
//! kv feed:  workers' prefix-cache events {p}:kv:{id} ─► the router's prefix index
//! ```

mod adapter_names;
mod backend;
mod dispatch;
mod kv_feed;
mod models;
mod pass;
pub mod prefix_index;
mod registry;
mod relay;
pub mod routing;
mod splice;
mod worker_ledger;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use kestrel_server::ServerConfig;
use tokio::net::TcpListener;

pub use backend::FleetBackend;
pub use registry::{FleetView, Registry};

use crate::keys::Keys;
use crate::redis_io::Redis;
use crate::FleetError;
use models::ServedModels;
use routing::Routing;

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
    /// Which stream a request is queued on (see [`routing`]).
    pub routing: Routing,
    /// Most distinct prefix-cache blocks the routing index keeps.
    pub prefix_index_max_blocks: usize,
    /// Longest text per request the routes template or tokenize (413 beyond it).
    pub max_input_bytes: usize,
    /// Events a streaming client may fall behind before its request is aborted.
    pub max_buffered_events: usize,
}

impl GatewayConfig {
    /// Defaults on `redis_url`: queue limit 1024, 30 s without workers, 10 minute TTLs,
    /// cache-aware routing with an index of at most 262,144 blocks, `kestrel serve`'s input
    /// and buffering limits.
    pub fn new(redis_url: &str) -> GatewayConfig {
        GatewayConfig {
            redis_url: redis_url.to_string(),
            keys: Keys::default(),
            max_queue_len: 1024,
            no_worker_timeout: Duration::from_secs(30),
            result_ttl: Duration::from_secs(600),
            max_queue_time: None,
            min_client_priority: 0,
            routing: Routing::CacheAware,
            prefix_index_max_blocks: 1 << 18,
            max_input_bytes: kestrel_server::state::DEFAULT_MAX_INPUT_BYTES,
            max_buffered_events: kestrel_server::event_buffer::DEFAULT_MAX_BUFFERED_EVENTS,
        }
    }
}

/// What the gateway's tasks share.
pub(crate) struct GatewayShared {
    config: GatewayConfig,
    keys: Keys,
    redis: Redis,
    registry: Arc<Registry>,
    /// Where requests are queued.
    router: routing::Router,
    /// The routes of each served model, by name.
    models: ServedModels,
    /// The ids the routes know the workers' LoRA adapters by.
    adapters: adapter_names::AdapterNames,
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
    let shared = Arc::new(GatewayShared {
        keys: config.keys.clone(),
        redis: redis.clone(),
        registry: Arc::new(Registry::default()),
        router: routing::Router::new(config.routing, config.prefix_index_max_blocks),
        models: ServedModels::default(),
        adapters: adapter_names::AdapterNames::default(),
        gateway_id: gateway_id(),
        next_id: AtomicU64::new(0),
        active: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
        config,
    });
    let registry = tokio::spawn(shared.registry.clone().run(redis, shared.keys.clone()));
    let kv_feed = match shared.config.routing {
        Routing::CacheAware => Some(tokio::spawn(kv_feed::run(shared.clone()))),
        Routing::Shared => None,
    };
    let loader = tokio::spawn(models::keep_loaded(
        shared.clone(),
        http.clone(),
        metrics.clone(),
    ));
    // The request id is assigned out here too, so that the answers given before any model's
    // routes (503 before a model is known, a missing or unknown `model`) carry one; the
    // routes' own `assign` keeps it.
    let app = {
        let shared = shared.clone();
        let http = http.clone();
        Router::new()
            .fallback_service(tower::service_fn(move |req: Request| {
                let shared = shared.clone();
                let http = http.clone();
                let metrics = metrics.clone();
                async move {
                    let response = dispatch::dispatch(&shared, &http, &metrics, req).await;
                    Ok::<_, std::convert::Infallible>(response)
                }
            }))
            .layer(axum::middleware::from_fn(
                kestrel_server::request_id::assign,
            ))
    };
    let backend = Arc::new(FleetBackend::new(
        shared.clone(),
        None,
        tokio::runtime::Handle::current(),
    ));
    let served = kestrel_server::serve_app(listener, app, backend, &http, shutdown).await;
    registry.abort();
    loader.abort();
    if let Some(feed) = kv_feed {
        feed.abort();
    }
    served.map_err(|e| FleetError::Serve(e.to_string()))
}

/// A name for this gateway's request ids, unique across restarts and replicas.
fn gateway_id() -> String {
    format!(
        "g{:08x}{:04x}",
        crate::protocol::unix_ms() & 0xffff_ffff,
        rand::random::<u16>()
    )
}
