//! [`Backend`]: what the routes run requests on. `kestrel serve` runs them on an engine in this
//! process ([`EngineHandle`]); the fleet's gateway runs them on remote workers. The routes,
//! validation, SSE encoders and logging are the same for both, so a client cannot tell them apart.
//!
//! A backend hands back an [`EventStream`] per submitted request: tokens, then exactly one
//! `Finished` or `Failed`. Dropping the stream before its end aborts the request.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{self, BoxStream, StreamExt};
use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::adapters::{AdapterCard, AdapterError};
use kestrel_engine::api::{EngineEvent, EngineRequest, EngineStats, RequestLimits};
use kestrel_engine::constraint::{ConstraintError, GrammarSpec};
use kestrel_engine::handle::Admission;
use kestrel_engine::handle::{EngineHandle, ResponseStream};
use kestrel_engine::prompt_pass::{PromptPassError, PromptTokenScore};

use crate::error::ApiError;
use crate::model_slot::ModelState;

/// The events of one submitted request. Dropping it before the end aborts the request.
pub struct EventStream {
    id: u64,
    events: BoxStream<'static, EngineEvent>,
    /// Resolves when the backend queued or refused the request; `None`: queued already.
    admission: Option<BoxFuture<'static, Admission>>,
}

impl EventStream {
    /// A stream of `events` for the request the backend calls `id` (used in logs).
    pub fn new(id: u64, events: BoxStream<'static, EngineEvent>) -> EventStream {
        EventStream {
            id,
            events,
            admission: None,
        }
    }

    /// The same stream, admitted only once `admission` resolves (a backend whose refusals
    /// come later than `submit`, such as a first-token objective checked by a remote engine).
    pub fn with_admission(mut self, admission: BoxFuture<'static, Admission>) -> EventStream {
        self.admission = Some(admission);
        self
    }

    /// Waits until the backend queued the request (`Ok` at once for a backend that queues
    /// every request it accepts), or returns why it refused it.
    pub async fn admitted(&mut self) -> Admission {
        match self.admission.take() {
            Some(answer) => answer.await,
            None => Ok(()),
        }
    }

    /// The backend's id for this request.
    pub fn request_id(&self) -> u64 {
        self.id
    }

    /// The next event; `None` after the last.
    pub async fn next(&mut self) -> Option<EngineEvent> {
        self.events.next().await
    }
}

impl From<ResponseStream> for EventStream {
    fn from(mut s: ResponseStream) -> EventStream {
        let id = s.request_id();
        let admission = s.take_admission().map(FutureExt::boxed);
        let events = stream::unfold(s, |mut s| async move { s.next().await.map(|e| (e, s)) });
        EventStream {
            admission,
            ..EventStream::new(id, events.boxed())
        }
    }
}

/// Batch and admission limits, as `/info` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Requests in flight beyond this are refused (429); `None`: no limit.
    pub max_concurrent_requests: Option<usize>,
    /// Token budget of one engine step.
    pub max_num_batched_tokens: usize,
    /// Most sequences in one step.
    pub max_num_seqs: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV blocks of one engine.
    pub num_kv_blocks: usize,
}

/// Another model served under the same address, as `/v1/models` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerModel {
    /// The name requests give as `model`.
    pub id: String,
    /// Its longest prompt + output in tokens.
    pub max_model_len: usize,
    /// The LoRA adapters served on it (listed after it, with it as their `parent`).
    pub adapters: Vec<AdapterCard>,
    /// Whether it is in memory, where that can change (`None`: always loaded).
    pub state: Option<ModelState>,
}

/// What `/health` reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackendHealth {
    /// Whether requests can be served now.
    pub ready: bool,
    pub running: usize,
    pub waiting: usize,
    /// Fraction of KV blocks in use, 0..=1 (the highest of several engines).
    pub kv_usage: f64,
}

/// Where requests run.
/// How long a readiness probe waits for the engine thread's heartbeat (it answers between
/// steps; one step takes milliseconds to a few seconds for a large prefill chunk).
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

pub trait Backend: Send + Sync + 'static {
    /// Starts `req`. Refusals: overloaded (429) or unavailable (503).
    fn submit(&self, req: EngineRequest) -> Result<EventStream, ApiError>;

    /// What a request must fit (vocabulary, context), for [`EngineRequest::new`].
    fn request_limits(&self) -> RequestLimits;

    /// The batch and admission limits.
    fn capacity(&self) -> Capacity;

    /// This process's engine counters, exported as its gauges; `None` when requests run in
    /// other processes (which export their own).
    fn engine_stats(&self) -> Option<EngineStats>;

    /// Readiness and load, for `/health`; may block briefly (run it on the blocking pool).
    fn health(&self) -> BackendHealth;

    /// Stops taking requests and lets in-flight ones finish within `deadline`. Blocks the
    /// calling thread (call it from `spawn_blocking`). Later calls return at once.
    fn shutdown(&self, deadline: Duration);

    /// Other models served beside this backend's under the same address (a gateway in front
    /// of workers of several models), for `/v1/models`; none by default.
    fn peer_models(&self) -> Vec<PeerModel> {
        Vec::new()
    }

    /// Whether this backend's own model is in memory, where that can change (a gateway in
    /// front of workers of several models); `None` by default: always loaded, and
    /// `/v1/models` shows no status, as a server of one model.
    fn model_state(&self) -> Option<ModelState> {
        None
    }

    /// Problems an operator should see in `/health` (e.g. a fleet worker refused for
    /// announcing another model under a served name); none by default.
    fn health_notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// The LoRA adapters requests may name; none by default.
    fn adapters(&self) -> Vec<AdapterCard> {
        Vec::new()
    }

    /// The id of the adapter called `name`, if one is registered.
    fn adapter_id(&self, name: &str) -> Option<AdapterId> {
        self.adapters()
            .into_iter()
            .find(|c| c.name == name)
            .map(|c| c.id)
    }

    /// Registers and loads a LoRA adapter. Blocks (call it from `spawn_blocking`).
    fn load_adapter(&self, name: &str, path: PathBuf) -> Result<AdapterCard, ApiError> {
        let _ = path;
        Err(ApiError::Invalid(format!(
            "this server cannot load LoRA adapters (asked for '{name}')"
        )))
    }

    /// Checks that a structured-output grammar compiles for the served model (before the
    /// request is queued). Backends without constrained decoding refuse every grammar.
    fn validate_grammar(&self, spec: &GrammarSpec) -> Result<(), ConstraintError> {
        let _ = spec;
        Err(ConstraintError::Unavailable)
    }

    /// Unloads a LoRA adapter. Blocks (call it from `spawn_blocking`).
    fn unload_adapter(&self, name: &str) -> Result<(), ApiError> {
        Err(ApiError::Adapter(AdapterError::NotFound(name.to_string())))
    }

    /// Per token of `tokens`, its score given the tokens before it (`None` for the first)
    /// with `top_n` alternatives, under `adapter`. Blocks (call it from `spawn_blocking`).
    fn prompt_logprobs(
        &self,
        tokens: Vec<u32>,
        top_n: usize,
        adapter: Option<AdapterId>,
    ) -> Result<Vec<Option<PromptTokenScore>>, ApiError> {
        let _ = (tokens, top_n, adapter);
        Err(ApiError::param(
            "prompt_logprobs",
            "this server cannot compute prompt logprobs",
        ))
    }

    /// The last token's final hidden state of the prompt `tokens` (not normalised). Blocks
    /// (call it from `spawn_blocking`).
    fn embed(&self, tokens: Vec<u32>) -> Result<Vec<f32>, ApiError> {
        let _ = tokens;
        Err(ApiError::Invalid(
            "this server cannot compute embeddings".into(),
        ))
    }
}

impl Backend for EngineHandle {
    fn submit(&self, req: EngineRequest) -> Result<EventStream, ApiError> {
        EngineHandle::submit(self, req)
            .map(EventStream::from)
            .map_err(ApiError::from)
    }

    fn request_limits(&self) -> RequestLimits {
        self.limits()
    }

    fn capacity(&self) -> Capacity {
        let (config, stats) = (self.config(), self.stats());
        Capacity {
            max_concurrent_requests: config.max_concurrent_requests,
            max_num_batched_tokens: config.max_num_batched_tokens,
            max_num_seqs: config.max_num_seqs,
            block_size: stats.block_size,
            num_kv_blocks: stats.num_kv_blocks,
        }
    }

    fn engine_stats(&self) -> Option<EngineStats> {
        Some(self.stats())
    }

    fn embed(&self, tokens: Vec<u32>) -> Result<Vec<f32>, ApiError> {
        EngineHandle::embed(self, tokens).map_err(|e| pass_error("input", e))
    }

    fn prompt_logprobs(
        &self,
        tokens: Vec<u32>,
        top_n: usize,
        adapter: Option<AdapterId>,
    ) -> Result<Vec<Option<PromptTokenScore>>, ApiError> {
        EngineHandle::prompt_logprobs(self, tokens, top_n, adapter)
            .map_err(|e| pass_error("prompt", e))
    }

    /// Ready while the engine thread answers a heartbeat within [`HEARTBEAT_TIMEOUT`] (no
    /// request is queued). Blocks up to that long: call it off the async workers.
    fn health(&self) -> BackendHealth {
        let stats = self.stats();
        let ready = self.ping(HEARTBEAT_TIMEOUT);
        BackendHealth {
            ready,
            running: stats.running,
            waiting: stats.waiting,
            kv_usage: stats.kv_usage,
        }
    }

    fn shutdown(&self, deadline: Duration) {
        EngineHandle::shutdown(self, deadline);
    }

    fn adapters(&self) -> Vec<AdapterCard> {
        EngineHandle::adapters(self)
    }

    fn adapter_id(&self, name: &str) -> Option<AdapterId> {
        EngineHandle::adapter_id(self, name)
    }

    fn load_adapter(&self, name: &str, path: PathBuf) -> Result<AdapterCard, ApiError> {
        EngineHandle::load_adapter(self, name, path).map_err(ApiError::from)
    }

    fn validate_grammar(&self, spec: &GrammarSpec) -> Result<(), ConstraintError> {
        EngineHandle::validate_grammar(self, spec)
    }

    fn unload_adapter(&self, name: &str) -> Result<(), ApiError> {
        EngineHandle::unload_adapter(self, name).map_err(ApiError::from)
    }
}

/// A failed pass over a prompt as an API error: bad input names `param`.
fn pass_error(param: &'static str, e: PromptPassError) -> ApiError {
    match e {
        PromptPassError::EmptyInput
        | PromptPassError::TokenOutOfVocab { .. }
        | PromptPassError::TooLong { .. } => ApiError::param(param, e.to_string()),
        PromptPassError::NoKvSpace { .. } | PromptPassError::Stopped => {
            ApiError::Unavailable(e.to_string())
        }
        PromptPassError::Model(m) => ApiError::Internal(m),
    }
}
