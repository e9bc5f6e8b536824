//! [`FleetBackend`]: the gateway's [`Backend`] for one served model. Admission is decided from
//! the registry's view of that model's identity (no live worker: 503; queue at its limit:
//! 429); an admitted request becomes a [`Job`] carrying the identity, which a [`relay`] task
//! queues on the identity's streams and follows. The job carries the request's
//! `X-Request-Id` and its first-token objective; a job with an objective is admitted only once
//! its worker's engine has (a predicted miss comes back as the engine's refusal, a 429 like on
//! `kestrel serve`). Health, its notes and shutdown are the whole gateway's.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::FutureExt;
use futures_util::stream::{self, StreamExt};
use std::path::PathBuf;

use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::adapters::AdapterCard;
use kestrel_engine::api::{EngineRequest, EngineStats, RequestLimits};
use kestrel_engine::constraint::{ConstraintError, GrammarSpec};
use kestrel_engine::prompt_pass::PromptTokenScore;
use kestrel_server::backend::{Backend, BackendHealth, Capacity, EventStream, PeerModel};
use kestrel_server::error::ApiError;
use kestrel_server::model_slot::ModelState;
use kestrel_server::request_id;
use tokio::sync::mpsc::unbounded_channel;
use tokio::sync::oneshot;

use super::models::ModelSlot;
use super::relay::relay;
use super::routing::{Decision, Route};
use super::GatewayShared;
use crate::identity::ModelIdentity;
use crate::metrics::REQUESTS_REJECTED_TOTAL;
use crate::pass::PassResult;
use crate::protocol::{Job, JobKind, WorkerStatus};

/// Requests for one model, run on the fleet's workers of its identity.
pub struct FleetBackend {
    shared: Arc<GatewayShared>,
    /// The model requests run on; `None` for the gateway-wide handle the HTTP server drains
    /// at shutdown (it runs no request).
    model: Option<Arc<ModelSlot>>,
    runtime: tokio::runtime::Handle,
}

impl FleetBackend {
    pub(super) fn new(
        shared: Arc<GatewayShared>,
        model: Option<Arc<ModelSlot>>,
        runtime: tokio::runtime::Handle,
    ) -> FleetBackend {
        FleetBackend {
            shared,
            model,
            runtime,
        }
    }

    fn admit(&self, model: &ModelSlot) -> Result<(), ApiError> {
        let shared = &self.shared;
        if shared.stopping.load(Ordering::Acquire) {
            return Err(ApiError::Unavailable("the gateway is shutting down".into()));
        }
        let view = shared.registry.view();
        if view.workers_of(model.identity()).next().is_none() {
            metrics::counter!(REQUESTS_REJECTED_TOTAL, "reason" => "no_workers").increment(1);
            return Err(ApiError::Unavailable(format!(
                "no inference worker of model `{}` is alive; retry later",
                model.identity().name
            )));
        }
        let depth = view.depth_of(model.identity());
        let limit = shared.config.max_queue_len;
        if depth >= limit {
            metrics::counter!(REQUESTS_REJECTED_TOTAL, "reason" => "queue_full").increment(1);
            return Err(ApiError::QueueFull { depth, limit });
        }
        Ok(())
    }
}

impl FleetBackend {
    /// Runs a one-pass job of `kind` over `tokens` on a worker of the model and waits for its
    /// answer. Blocks: call it off the async workers (the routes run it on the blocking pool).
    fn pass(
        &self,
        tokens: Vec<u32>,
        kind: JobKind,
        adapter: Option<AdapterId>,
    ) -> Result<PassResult, ApiError> {
        let Some(model) = self.model.as_ref() else {
            return Err(ApiError::Unavailable("no model is served yet".into()));
        };
        self.admit(model)?;
        let adapter = self.adapter_name(adapter)?;
        // Under an adapter, to the readiest, least busy worker serving it; else to the
        // shared stream.
        let route = match &adapter {
            None => Route::shared(Decision::Shared),
            Some(name) => {
                let view = self.shared.registry.view();
                let workers: Vec<_> = view
                    .workers_of(model.identity())
                    .filter(|w| serves(w, name))
                    .collect();
                if workers.is_empty() {
                    return Err(no_adapter_worker(model, name));
                }
                self.shared.router.route_pass(&workers, tokens.len())
            }
        };
        let shared = self.shared.clone();
        let number = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let job = Job::pass(
            format!("{}-{number}", shared.gateway_id),
            model.identity(),
            tokens,
            kind,
        )
        .with_request_id(request_id::current_string())
        .with_adapter(adapter);
        let identity = model.identity().clone();
        let (tx, rx) = oneshot::channel();
        shared.active.fetch_add(1, Ordering::AcqRel);
        self.runtime.spawn(async move {
            let answer = super::pass::run_pass(&shared, &identity, job, &route).await;
            shared.finished();
            let _ = tx.send(answer);
        });
        rx.blocking_recv()
            .map_err(|_| ApiError::Internal("the gateway stopped before the answer".into()))?
    }
}

impl FleetBackend {
    /// The name of the adapter the routes resolved to `id`.
    fn adapter_name(&self, id: Option<AdapterId>) -> Result<Option<String>, ApiError> {
        id.map(|id| {
            self.shared
                .adapters
                .name_of(id)
                .ok_or_else(|| ApiError::Internal(format!("the gateway knows no adapter by {id}")))
        })
        .transpose()
    }
}

impl Backend for FleetBackend {
    fn submit(&self, req: EngineRequest) -> Result<EventStream, ApiError> {
        let Some(model) = self.model.as_ref() else {
            return Err(ApiError::Unavailable("no model is served yet".into()));
        };
        self.admit(model)?;
        let shared = &self.shared;
        let number = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{number}", shared.gateway_id);
        let adapter = self.adapter_name(req.adapter())?;
        let view = shared.registry.view();
        let workers: Vec<_> = view
            .workers_of(model.identity())
            .filter(|w| adapter.as_ref().is_none_or(|a| serves(w, a)))
            .collect();
        if let Some(name) = &adapter {
            if workers.is_empty() {
                return Err(no_adapter_worker(model, name));
            }
        }
        let job = Job::new(id, model.identity(), &req, rand::random())
            .with_request_id(request_id::current_string())
            .with_adapter(adapter.clone());
        let (tx, rx) = unbounded_channel();
        // A first-token objective is checked by the worker's engine: the client's response
        // waits for its answer, so that a refusal is a 429 before any stream starts.
        let (admit, admission) = match job.ttft_slo_ms {
            Some(_) => {
                let (admit, admission) = oneshot::channel();
                (Some(admit), Some(admission))
            }
            None => (None, None),
        };
        shared.active.fetch_add(1, Ordering::AcqRel);
        let identity = model.identity().clone();
        let routed = match adapter {
            Some(_) => shared.router.route_pinned(&req, &workers),
            None => shared.router.route(&req, &workers),
        };
        self.runtime
            .spawn(relay(shared.clone(), identity, job, routed, tx, admit));
        let events = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
        let stream = EventStream::new(number, events.boxed());
        Ok(match admission {
            // A relay that ended without an answer also ended the events, which then tell.
            Some(rx) => stream.with_admission(rx.map(|answer| answer.unwrap_or(Ok(()))).boxed()),
            None => stream,
        })
    }

    fn validate_grammar(&self, spec: &GrammarSpec) -> Result<(), ConstraintError> {
        match self.model.as_ref().and_then(|m| m.constraints.as_ref()) {
            Some(factory) => factory.validate(spec),
            None => Err(ConstraintError::Unavailable),
        }
    }

    fn request_limits(&self) -> RequestLimits {
        self.model.as_ref().map_or(
            RequestLimits {
                vocab_size: 0,
                max_model_len: 0,
            },
            |m| m.descriptor.request_limits,
        )
    }

    fn capacity(&self) -> Capacity {
        let d = self.model.as_ref().map(|m| &m.descriptor);
        let workers = d.map_or(1, |d| {
            self.shared
                .registry
                .view()
                .workers_of(&d.identity)
                .count()
                .max(1)
        });
        Capacity {
            max_concurrent_requests: Some(self.shared.config.max_queue_len),
            max_num_batched_tokens: d.map_or(0, |d| d.max_num_batched_tokens),
            max_num_seqs: d.map_or(0, |d| d.max_num_seqs * workers),
            block_size: d.map_or(0, |d| d.block_size),
            num_kv_blocks: d.map_or(0, |d| d.num_kv_blocks),
        }
    }

    fn engine_stats(&self) -> Option<EngineStats> {
        None
    }

    /// The adapters the model's live workers announce (each once, under the gateway's id).
    fn adapters(&self) -> Vec<AdapterCard> {
        self.model
            .as_ref()
            .map(|m| announced_adapters(&self.shared, m.identity()))
            .unwrap_or_default()
    }

    /// Refused: the fleet's adapters are those its workers start with (a worker started
    /// later would not have one loaded at run time, and routing counts on every worker that
    /// announces an adapter having it).
    fn load_adapter(&self, name: &str, path: PathBuf) -> Result<AdapterCard, ApiError> {
        let _ = path;
        Err(ApiError::Invalid(format!(
            "a fleet cannot load LoRA adapters at run time (asked for '{name}'): start workers \
             with --lora-modules {name}=PATH"
        )))
    }

    /// Refused, as loading is.
    fn unload_adapter(&self, name: &str) -> Result<(), ApiError> {
        Err(ApiError::Invalid(format!(
            "a fleet cannot unload LoRA adapters at run time (asked for '{name}'): stop the \
             workers started with it, or restart them without it"
        )))
    }

    fn embed(&self, tokens: Vec<u32>) -> Result<Vec<f32>, ApiError> {
        match self.pass(tokens, JobKind::Embed, None)? {
            PassResult::Embedding(v) => Ok(v),
            PassResult::Failed(failure) => Err(failure.into_api_error("input")),
            PassResult::Scores(_) => Err(unexpected_answer()),
        }
    }

    fn prompt_logprobs(
        &self,
        tokens: Vec<u32>,
        top_n: usize,
        adapter: Option<AdapterId>,
    ) -> Result<Vec<Option<PromptTokenScore>>, ApiError> {
        match self.pass(tokens, JobKind::PromptLogprobs { top_n }, adapter)? {
            PassResult::Scores(scores) => Ok(scores
                .into_iter()
                .map(|s| s.map(PromptTokenScore::from))
                .collect()),
            PassResult::Failed(failure) => Err(failure.into_api_error("prompt")),
            PassResult::Embedding(_) => Err(unexpected_answer()),
        }
    }

    fn peer_models(&self) -> Vec<PeerModel> {
        let own = self.model.as_ref().map(|m| m.identity().name.as_str());
        let served = self.shared.models.all();
        let view = self.shared.registry.view();
        let several = served.len() > 1;
        served
            .iter()
            .filter(|m| Some(m.slot.identity().name.as_str()) != own)
            .map(|m| PeerModel {
                id: m.slot.identity().name.clone(),
                max_model_len: m.slot.descriptor.max_total_tokens,
                adapters: announced_adapters(&self.shared, m.slot.identity()),
                state: several.then(|| view.model_state(m.slot.identity())),
            })
            .collect()
    }

    /// On a gateway of several models, the best state among the model's live workers (as
    /// `kestrel serve` of several models reports each); with one model, none (always
    /// loaded, as a server of one model).
    fn model_state(&self) -> Option<ModelState> {
        let model = self.model.as_ref()?;
        (self.shared.models.all().len() > 1)
            .then(|| self.shared.registry.view().model_state(model.identity()))
    }

    /// Ready while any served model has a live worker; the load summed over every worker
    /// serving a bound model (refused ones take no job).
    fn health(&self) -> BackendHealth {
        let view = self.shared.registry.view();
        let serving: Vec<_> = view.serving_workers().collect();
        BackendHealth {
            ready: !serving.is_empty() && !self.shared.stopping.load(Ordering::Acquire),
            running: serving.iter().map(|w| w.running).sum(),
            waiting: serving.iter().map(|w| w.waiting).sum::<usize>() + view.total_depth(),
            kv_usage: serving.iter().map(|w| w.kv_usage).fold(0.0, f64::max),
        }
    }

    fn health_notes(&self) -> Vec<String> {
        self.shared.registry.view().notes()
    }

    fn shutdown(&self, deadline: Duration) {
        let shared = &self.shared;
        shared.stopping.store(true, Ordering::Release);
        let end = std::time::Instant::now() + deadline;
        while shared.active.load(Ordering::Acquire) > 0 && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A worker's answer of the wrong kind (a worker of another version).
fn unexpected_answer() -> ApiError {
    ApiError::Internal("a worker answered a one-pass job with another kind of answer".into())
}

/// Whether `worker` serves the LoRA adapter called `name`.
fn serves(worker: &WorkerStatus, name: &str) -> bool {
    worker.adapters.iter().any(|a| a.name == name)
}

/// No live worker of `model` serves the adapter called `name` (any more): a 503.
fn no_adapter_worker(model: &ModelSlot, name: &str) -> ApiError {
    ApiError::Unavailable(format!(
        "no live worker of model `{}` serves LoRA adapter `{name}`; retry later",
        model.identity().name
    ))
}

/// The adapters the live workers of `model` announce, each once, in name order, under the
/// gateway's ids.
fn announced_adapters(shared: &GatewayShared, model: &ModelIdentity) -> Vec<AdapterCard> {
    let view = shared.registry.view();
    let mut cards: Vec<AdapterCard> = Vec::new();
    for a in view.workers_of(model).flat_map(|w| &w.adapters) {
        if cards.iter().all(|c| c.name != a.name) {
            cards.push(AdapterCard {
                id: shared.adapters.id_of(&a.name),
                name: a.name.clone(),
                path: PathBuf::from(&a.path),
                rank: a.rank,
                resident: true,
            });
        }
    }
    cards.sort_by(|a, b| a.name.cmp(&b.name));
    cards
}
