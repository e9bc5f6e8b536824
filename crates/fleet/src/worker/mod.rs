//! [`Worker`]: a full Kestrel engine that takes requests from the fleet's Redis streams and
//! streams their events back.
//!
//! ```text
//! intake  ── XREADGROUP (high, normal, low; in each its own stream, then the shared one;
//!            only as many as the engine can start) ──► Jobs
//! Jobs    ── one task per job: engine events ─► XADD {p}:results:{id} ─► XACK + XDEL
//! upkeep  ── heartbeat key, XCLAIM own entries (fresh), XAUTOCLAIM dead workers' entries,
//!            take entries routed to other workers that wait too long or outlive them
//! cancel  ── SUBSCRIBE {p}:cancel ─► drop the job's engine stream (KV freed next step)
//! kv      ── the engine's prefix-cache events ─► XADD {p}:kv:{id} (for the gateways' routers)
//! ```
//!
//! The worker reads only the queues of its own [`ModelIdentity`] (name + fingerprint), and
//! refuses any job in them prepared for another identity (counted in
//! `kestrel:worker_foreign_jobs_total`). At start and with every heartbeat it claims its
//! served name ([`crate::binding`]); while the name is bound to another identity with live
//! workers it is refused: it says so in its log and `kestrel:worker_model_refused`, and takes
//! no job, since no gateway queues any for it.
//!
//! A job for a LoRA adapter the worker lacks (met when it takes over another worker's streams)
//! goes back to the queue of a worker that has it, and a job for a model loaded on demand that
//! has no room now goes back to the model's shared queue ([`requeue`]).
//!
//! Delivery is at least once: an entry is acknowledged only after its last event is published.
//! A worker that dies leaves its entries pending; once idle past `claim_idle` another worker
//! claims and re-runs them (same seed, so the same tokens), up to `max_deliveries` times.

mod cancel;
mod intake;
mod job_trace;
mod jobs;
mod kv_publisher;
pub mod model_host;
mod orphans;
mod requeue;
mod upkeep;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kestrel_engine::handle::EngineHandle;
use kestrel_model::weights::digest::WeightsDigest;
use kestrel_server::launch::Launched;
use model_host::{Described, ModelHost};

use crate::binding::Claim;
use crate::identity::{LoadSettings, ModelIdentity};
use crate::keys::Band;
use crate::keys::Keys;
use crate::protocol::{AnnouncedAdapter, ModelDescriptor};
use crate::redis_io::{ensure_groups, Redis};
use crate::FleetError;
use jobs::Jobs;

/// How a worker talks to the fleet.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub redis_url: String,
    /// Its consumer name in the group and its heartbeat key; unique in the fleet.
    pub worker_id: String,
    pub keys: Keys,
    /// How often it announces itself (its heartbeat expires after three of these).
    pub heartbeat: Duration,
    /// Pending entries idle this long belong to a dead worker and are claimed.
    pub claim_idle: Duration,
    /// A job delivered more often than this fails with a clear error instead of running again.
    pub max_deliveries: u32,
    /// How long a result stream outlives its last event.
    pub result_ttl: Duration,
    /// How the model was loaded beyond its file (part of its identity).
    pub load: LoadSettings,
    /// How long a job for a LoRA adapter that no live worker serves waits for one when its
    /// request set no queue time (then it fails with a clear error).
    pub adapter_wait: Duration,
}

impl WorkerConfig {
    /// Defaults for `worker_id` on `redis_url`: heartbeat 1 s, claim after 5 s idle, at most 3
    /// deliveries, results kept 10 minutes.
    pub fn new(redis_url: &str, worker_id: &str) -> WorkerConfig {
        WorkerConfig {
            redis_url: redis_url.to_string(),
            worker_id: worker_id.to_string(),
            keys: Keys::default(),
            heartbeat: Duration::from_secs(1),
            claim_idle: Duration::from_secs(5),
            max_deliveries: 3,
            result_ttl: Duration::from_secs(600),
            load: LoadSettings::default(),
            adapter_wait: requeue::DEFAULT_ADAPTER_WAIT,
        }
    }
}

/// What the worker's tasks share.
pub(crate) struct WorkerShared {
    config: WorkerConfig,
    redis: Redis,
    keys: Keys,
    worker_id: String,
    /// Its engine: fixed, or loaded on demand.
    host: Arc<ModelHost>,
    /// The model's descriptor, its identity included.
    descriptor: ModelDescriptor,
    /// The LoRA adapters its engine starts with (announced while it is not loaded).
    adapters: Vec<AnnouncedAdapter>,
    /// Whether its engine caches prefixes (and so publishes its cache's events).
    prefix_caching: bool,
    max_num_seqs: usize,
    stopping: AtomicBool,
    /// The last answer to claiming the served name (`None` before the first).
    claim: Mutex<Option<Claim>>,
}

impl WorkerShared {
    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// The model this worker serves.
    fn identity(&self) -> &ModelIdentity {
        &self.descriptor.identity
    }

    /// Every stream this worker takes new work from, in the order it reads them: each band's
    /// own stream, then its shared one.
    fn queues(&self) -> Vec<String> {
        Band::ALL
            .iter()
            .flat_map(|b| {
                [
                    self.keys
                        .worker_requests(self.identity(), &self.worker_id, *b),
                    self.keys.requests(self.identity(), *b),
                ]
            })
            .collect()
    }

    /// The streams routed to this worker alone, highest band first.
    fn own_queues(&self) -> Vec<String> {
        Band::ALL
            .iter()
            .map(|b| {
                self.keys
                    .worker_requests(self.identity(), &self.worker_id, *b)
            })
            .collect()
    }

    /// The block size the gateway's router hashes prompts by, when this worker's engine
    /// caches prefixes (and so publishes its cache's events).
    fn prefix_block_size(&self) -> Option<usize> {
        self.prefix_caching.then_some(self.descriptor.block_size)
    }

    /// Records `claim`, logging and exporting a change.
    fn record_claim(&self, claim: Claim) {
        let mut last = self.claim.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref() == Some(&claim) {
            return;
        }
        let me = self.identity();
        match &claim {
            Claim::Bound => tracing::info!(model = %me, "serving the model"),
            Claim::TookOver { from } => tracing::warn!(
                model = %me,
                previous = %from,
                "took over the served name: no worker of its previous identity is alive"
            ),
            Claim::Refused { holder, live } => tracing::error!(
                model = %me,
                fingerprint = %me.fingerprint,
                serving = %holder.fingerprint,
                live,
                "refused: the fleet serves this name as another model (other weights, \
                 quantization, tokenizer, template or limits); taking no jobs until its \
                 workers are gone. Give this model another --served-model-name."
            ),
        }
        let refused = matches!(claim, Claim::Refused { .. });
        metrics::gauge!(crate::metrics::WORKER_MODEL_REFUSED).set(f64::from(u8::from(refused)));
        *last = Some(claim);
    }
}

/// A started engine connected to the fleet.
pub struct Worker {
    shared: Arc<WorkerShared>,
}

impl Worker {
    /// Connects to Redis (waiting up to 30 s for it), works out the model's identity
    /// (hashing its weights, or reading the cached digest), creates its queues' consumer
    /// group if needed and announces the model.
    pub async fn connect(config: WorkerConfig, launched: &Launched) -> Result<Worker, FleetError> {
        let path = launched.weights.clone();
        let digest = tokio::task::spawn_blocking(move || WeightsDigest::of(&path))
            .await
            .map_err(|e| FleetError::Model(format!("hashing the weights failed: {e}")))?
            .map_err(|e| FleetError::Model(e.to_string()))?;
        let identity = crate::identity::identify(launched, &digest, &config.load)?;
        let described = Described {
            descriptor: crate::descriptor::describe(launched, identity)?,
            adapters: model_host::announced(&launched.engine),
        };
        let host = ModelHost::Fixed(launched.engine.clone());
        Worker::with_host(config, described, host).await
    }

    /// [`Worker::connect`] for a model described already whose engine comes from `host` (a
    /// model loaded on demand: its heartbeat says whether it is loaded).
    pub async fn with_host(
        config: WorkerConfig,
        described: Described,
        host: ModelHost,
    ) -> Result<Worker, FleetError> {
        crate::metrics::describe_worker();
        let redis = Redis::connect(&config.redis_url, Duration::from_secs(30)).await?;
        let descriptor = described.descriptor;
        ensure_groups(&redis, &config.keys, &descriptor.identity).await?;
        let prefix_caching = match &host {
            ModelHost::Fixed(engine) => engine.config().enable_prefix_caching,
            // Its cache goes with each unload: no cache-aware routing to it.
            ModelHost::OnDemand(_) => false,
        };
        let shared = Arc::new(WorkerShared {
            keys: config.keys.clone(),
            worker_id: config.worker_id.clone(),
            max_num_seqs: descriptor.max_num_seqs,
            host: Arc::new(host),
            descriptor,
            adapters: described.adapters,
            prefix_caching,
            redis,
            config,
            stopping: AtomicBool::new(false),
            claim: Mutex::new(None),
        });
        announce_model(&shared).await?;
        Ok(Worker { shared })
    }

    /// The identity this worker serves.
    pub fn identity(&self) -> &ModelIdentity {
        self.shared.identity()
    }

    /// Its id in the fleet.
    pub fn id(&self) -> &str {
        &self.shared.worker_id
    }

    /// Takes and runs work until `shutdown` resolves; then takes no more, lets running jobs
    /// finish within `deadline` (the rest stay pending for other workers), removes its
    /// heartbeat and stops the engine.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
        deadline: Duration,
    ) -> Result<(), FleetError> {
        let shared = self.shared;
        let jobs = Jobs::new(
            shared.host.clone(),
            shared.redis.clone(),
            shared.keys.clone(),
            shared.identity().clone(),
            shared.worker_id.clone(),
            (shared.config.result_ttl, shared.config.adapter_wait),
        );
        // The first heartbeat, and with it the streams routed to this worker, before it reads.
        if let Err(e) = upkeep::beat(&shared, &jobs).await {
            tracing::warn!(error = %e, "the first heartbeat failed");
        }
        let tasks = [
            tokio::spawn(intake::run(shared.clone(), jobs.clone())),
            tokio::spawn(upkeep::run(shared.clone(), jobs.clone())),
            tokio::spawn(cancel::run(shared.clone(), jobs.clone())),
            tokio::spawn(kv_publisher::run(shared.clone())),
        ];
        tracing::info!(worker = %shared.worker_id, "worker taking requests");
        shutdown.await;
        tracing::info!("stopping: no new requests; finishing running ones");
        shared.stopping.store(true, Ordering::Release);
        let drained = tokio::time::timeout(deadline, async {
            while !jobs.is_empty() {
                let _ =
                    tokio::time::timeout(Duration::from_millis(100), jobs.freed.notified()).await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = jobs.len(),
                "deadline passed; unfinished jobs stay queued"
            );
        }
        for t in tasks {
            t.abort();
        }
        let mut conn = shared.redis.conn();
        let _ = redis::cmd("DEL")
            .arg(shared.keys.worker(&shared.worker_id))
            .arg(shared.keys.kv_events(&shared.worker_id))
            .query_async::<()>(&mut conn)
            .await;
        // A model loaded on demand is its registry's to stop.
        if let ModelHost::Fixed(engine) = &*shared.host {
            let engine = engine.clone();
            let _ = tokio::task::spawn_blocking(move || engine.shutdown(Duration::ZERO)).await;
        }
        Ok(())
    }
}

/// Stores the model's descriptor (the gateway serves from it) and claims its served name.
async fn announce_model(shared: &WorkerShared) -> Result<(), redis::RedisError> {
    let json = serde_json::to_string(&shared.descriptor).unwrap_or_default();
    let mut conn = shared.redis.conn();
    redis::cmd("SET")
        .arg(shared.keys.model(shared.identity()))
        .arg(json)
        .query_async::<()>(&mut conn)
        .await?;
    let claim = crate::binding::claim(&shared.redis, &shared.keys, shared.identity()).await?;
    shared.record_claim(claim);
    Ok(())
}

/// The worker's own HTTP routes: `/metrics` (its engine's `kestrel:*` series) and `/health`
/// (200 while the engine takes requests), echoing `X-Request-Id` like every Kestrel route.
pub fn metrics_router(
    engine: EngineHandle,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> axum::Router {
    let health_engine = engine.clone();
    let render = move || {
        let stats = engine.stats();
        kestrel_server::metrics::render_with(&metrics, Some(stats))
    };
    worker_routes(render, move || health_engine_ready(&health_engine))
}

/// [`metrics_router`] of a worker process whose engines record their series under their
/// model's name (one model or several): each engine's gauges carry `model_name`, and
/// `/health` is 200 while every engine running takes requests.
pub fn metrics_router_of(
    engines: EngineList,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> axum::Router {
    let health_engines = engines.clone();
    let render = move || {
        use kestrel_engine::metrics::names;
        for (name, engine) in &engines() {
            let stats = engine.stats();
            let gauge = |series: &'static str, value: f64| {
                let labels = vec![metrics::Label::new("model_name", name.clone())];
                metrics::gauge!(series, labels).set(value);
            };
            gauge(names::NUM_REQUESTS_RUNNING, stats.running as f64);
            gauge(names::NUM_REQUESTS_WAITING, stats.waiting as f64);
            gauge(names::KV_CACHE_USAGE_PERC, stats.kv_usage);
            gauge(names::KV_FREE_BLOCKS, stats.kv_free_blocks as f64);
            gauge(names::KV_CACHE_FRAGMENTATION_PERC, stats.kv_fragmentation);
        }
        kestrel_server::metrics::render_with(&metrics, None)
    };
    worker_routes(render, move || {
        health_engines().iter().all(|(_, e)| health_engine_ready(e))
    })
}

/// The engines a worker process runs now, by model name (those of models loaded on demand
/// change as they load and unload).
pub type EngineList = Arc<dyn Fn() -> Vec<(String, EngineHandle)> + Send + Sync>;

fn health_engine_ready(engine: &EngineHandle) -> bool {
    use kestrel_server::backend::Backend;
    engine.health().ready
}

fn worker_routes(
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
    ready: impl Fn() -> bool + Clone + Send + Sync + 'static,
) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let text = render();
                async move { text }
            }),
        )
        .route(
            "/health",
            get(move || {
                let ready = ready();
                let draining = kestrel_server::heap_watch::draining_reason();
                async move {
                    match (ready, draining) {
                        (true, None) => (axum::http::StatusCode::OK, "ok".to_string()),
                        (_, Some(reason)) => (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            format!("unavailable: {reason}"),
                        ),
                        (false, None) => (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            "unavailable".to_string(),
                        ),
                    }
                }
            }),
        )
        .layer(axum::middleware::from_fn(
            kestrel_server::request_id::assign,
        ))
}
