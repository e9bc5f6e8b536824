//! [`EngineHandle`]: the engine's front door. `start` moves an [`EngineCore`] onto its own
//! thread; `submit` sends a request (validated when it was built, see
//! [`EngineRequest::new`] and [`EngineHandle::limits`]) over a command channel and returns a
//! [`ResponseStream`] of [`EngineEvent`]s.
//!
//! ```text
//!  callers (any thread, async or not)             engine thread (sole owner of all state)
//!  submit ── Command::Submit ──► std mpsc ──►  drain commands ─► step ─► step ─► ...
//!  ResponseStream ◄──── tokio unbounded mpsc ◄── TokenEvent / Finished / Failed
//!  drop(ResponseStream) ── Command::Abort ──►    (blocks freed on the next drain)
//! ```
//!
//! A request with a first-token objective also gets an admission answer
//! ([`ResponseStream::admitted`]): the engine thread says whether it queued the request or
//! refused it (an objective it predicts it cannot meet, among others), so a streaming route
//! can answer 429 before it starts its response.
//!
//! LoRA adapters are loaded and unloaded the same way: `load_adapter` / `unload_adapter` send a
//! command and wait for the engine thread's reply; the registered adapters are published back
//! as a snapshot ([`EngineHandle::adapters`]) for routes that resolve adapter names.
//!
//! The engine thread blocks on the command channel whenever it has no work.

mod engine_loop;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use crate::adapter_id::AdapterId;
use crate::adapters::{AdapterCard, AdapterError};
use crate::api::{
    EngineEvent, EngineFailure, EngineRequest, EngineStats, RequestLimits, SubmitError,
};
use crate::config::EngineConfig;
use crate::constraint::{ConstraintError, ConstraintFactory, GrammarSpec};
use crate::core::EngineCore;
use crate::executor::Executor;
use crate::kv::disk_tier::DiskTier;
use crate::output::TokenDecoder;
use crate::prompt_pass::{PromptPassError, PromptTokenScore};
use crate::request::RequestId;
use crate::scheduler::SchedulerError;
use crate::speculative::Speculator;

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineStartError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] SchedulerError),
    /// The engine thread could not be spawned.
    #[error("could not spawn the engine thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// What callers send the engine thread.
pub(crate) enum Command {
    Submit {
        id: RequestId,
        req: Box<EngineRequest>,
        events: UnboundedSender<EngineEvent>,
        /// Told whether the request was queued (requests with a first-token objective only).
        admission: Option<oneshot::Sender<Admission>>,
    },
    Abort(RequestId),
    LoadAdapter {
        name: String,
        path: PathBuf,
        reply: mpsc::Sender<Result<AdapterCard, AdapterError>>,
    },
    UnloadAdapter {
        name: String,
        reply: mpsc::Sender<Result<(), AdapterError>>,
    },
    Shutdown {
        deadline: Instant,
    },
    Embed {
        tokens: Vec<u32>,
        reply: mpsc::Sender<Result<Vec<f32>, PromptPassError>>,
    },
    PromptLogprobs {
        tokens: Vec<u32>,
        top_n: usize,
        adapter: Option<AdapterId>,
        reply: mpsc::Sender<PromptScores>,
    },
    /// A heartbeat: the loop answers between steps, queueing nothing.
    Ping {
        reply: mpsc::Sender<()>,
    },
    /// Send the prefix cache's changes here from now on.
    WatchKvEvents {
        sink: tokio::sync::mpsc::Sender<Vec<crate::kv::KvEvent>>,
    },
    /// Report the steps of traced requests here from now on.
    WatchSteps {
        sink: tokio::sync::mpsc::Sender<crate::step_trace::StepTrace>,
    },
}

/// Whether the engine queued a request ([`ResponseStream::admitted`]).
pub type Admission = Result<(), EngineFailure>;

/// What [`EngineHandle::prompt_logprobs`] answers: per prompt token (`None` for the first).
pub type PromptScores = Result<Vec<Option<PromptTokenScore>>, PromptPassError>;

struct Shared {
    config: EngineConfig,
    commands: mpsc::Sender<Command>,
    stats: Arc<Mutex<EngineStats>>,
    adapters: Arc<Mutex<Vec<AdapterCard>>>,
    in_flight: Arc<AtomicUsize>,
    stopping: AtomicBool,
    next_id: AtomicU64,
    limits: RequestLimits,
    constraints: Option<Arc<ConstraintFactory>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A cheap, cloneable, `Send + Sync` handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
}

/// A recorder an engine thread records its metrics through ([`EngineOptions::metrics_recorder`]).
pub type MetricsRecorder = Arc<dyn metrics::Recorder + Send + Sync>;

/// Optional features of an engine, for [`EngineHandle::try_start_with`].
#[derive(Default)]
pub struct EngineOptions {
    /// Speculative decoding (`None`: off).
    pub speculator: Option<Speculator>,
    /// Compiles the grammars of structured output (`None`: requests with a grammar are
    /// refused).
    pub constraints: Option<Arc<ConstraintFactory>>,
    /// What to do with first-token objectives the engine predicts it cannot meet.
    pub slo_admission: SloAdmission,
    /// The KV disk tier under the prefix cache (`None`: RAM only).
    pub disk_tier: Option<DiskTier>,
    /// Where the engine thread records its metrics instead of the process's recorder (e.g.
    /// one that labels every series with the model's name, when a process runs several
    /// engines); `None`: the process's recorder.
    pub metrics_recorder: Option<MetricsRecorder>,
}

/// Whether requests with a first-token objective (`ttft_slo`) are checked at admission.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SloAdmission {
    /// Refuse a request whose objective the predictor says cannot be met (the default).
    #[default]
    Enforce,
    /// Admit every request; objectives only count towards the met/missed metrics.
    Off,
}

impl EngineHandle {
    /// Spawns the engine thread (the single owner of scheduler, KV manager, executor and
    /// samplers).
    ///
    /// # Panics
    /// If `config` is invalid or the thread cannot be spawned; see [`EngineHandle::try_start`].
    pub fn start(
        executor: Box<dyn Executor>,
        decoder: Arc<dyn TokenDecoder + Send + Sync>,
        eos_token_ids: Vec<u32>,
        config: EngineConfig,
    ) -> EngineHandle {
        match Self::try_start(executor, decoder, eos_token_ids, config) {
            Ok(h) => h,
            Err(e) => panic!("cannot start the engine: {e}"),
        }
    }

    /// Like [`EngineHandle::start`], returning configuration and spawn errors.
    pub fn try_start(
        executor: Box<dyn Executor>,
        decoder: Arc<dyn TokenDecoder + Send + Sync>,
        eos_token_ids: Vec<u32>,
        config: EngineConfig,
    ) -> Result<EngineHandle, EngineStartError> {
        Self::try_start_with(
            executor,
            decoder,
            eos_token_ids,
            config,
            EngineOptions::default(),
        )
    }

    /// Like [`EngineHandle::try_start`], with the optional features in `options`.
    pub fn try_start_with(
        executor: Box<dyn Executor>,
        decoder: Arc<dyn TokenDecoder + Send + Sync>,
        eos_token_ids: Vec<u32>,
        config: EngineConfig,
        options: EngineOptions,
    ) -> Result<EngineHandle, EngineStartError> {
        let EngineOptions {
            speculator,
            constraints,
            slo_admission,
            disk_tier,
            metrics_recorder,
        } = options;
        let mut core = EngineCore::new(executor, decoder, eos_token_ids, &config)?
            .with_constraints(constraints.clone())
            .with_slo_admission(slo_admission == SloAdmission::Enforce);
        if let Some(speculator) = speculator {
            core = core.with_speculator(speculator);
        }
        if let Some(tier) = disk_tier {
            core = core.with_disk_tier(tier)?;
        }
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(Mutex::new(core.stats()));
        let adapters = Arc::new(Mutex::new(core.adapters()));
        let limits = core.limits();
        let engine = engine_loop::EngineLoop::new(core, rx, stats.clone(), adapters.clone());
        let thread = std::thread::Builder::new()
            .name("kestrel-engine".into())
            .spawn(move || match metrics_recorder {
                Some(recorder) => metrics::with_local_recorder(&*recorder, || engine.run()),
                None => engine.run(),
            })?;
        let shared = Shared {
            config,
            commands: tx,
            stats,
            adapters,
            in_flight: Arc::new(AtomicUsize::new(0)),
            stopping: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            limits,
            constraints,
            thread: Mutex::new(Some(thread)),
        };
        Ok(EngineHandle {
            shared: Arc::new(shared),
        })
    }

    /// Admits a request. Errors: [`SubmitError::Overloaded`] beyond `max_concurrent_requests`
    /// live streams, [`SubmitError::Stopped`] once shutdown began. The request itself was
    /// checked when it was built (against [`EngineHandle::limits`]).
    pub fn submit(&self, req: EngineRequest) -> Result<ResponseStream, SubmitError> {
        let s = &self.shared;
        if s.stopping.load(Ordering::Acquire) {
            return Err(SubmitError::Stopped);
        }
        let permit = InFlight::acquire(&s.in_flight, s.config.max_concurrent_requests)?;
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let (events, rx) = unbounded_channel();
        let (admission, admitted) = match req.ttft_slo() {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        s.commands
            .send(Command::Submit {
                id,
                req: Box::new(req),
                events,
                admission,
            })
            .map_err(|_| SubmitError::Stopped)?;
        Ok(ResponseStream {
            id,
            events: rx,
            commands: s.commands.clone(),
            permit: Some(permit),
            done: false,
            admitted,
        })
    }

    /// Whether the engine thread answers a heartbeat within `timeout` (it answers between
    /// steps, so a long step delays the answer). Queues no request; blocks the caller.
    pub fn ping(&self, timeout: Duration) -> bool {
        if self.shared.stopping.load(Ordering::Acquire) {
            return false;
        }
        let (reply, rx) = mpsc::channel();
        if self.shared.commands.send(Command::Ping { reply }).is_err() {
            return false;
        }
        rx.recv_timeout(timeout).is_ok()
    }

    /// The prefix cache's changes from now on, in batches: the first a snapshot (every cached
    /// block after [`crate::kv::KvEvent::AllCleared`]), then what each step stored and removed.
    /// At most `capacity` batches wait in the channel; the engine thread never waits for the
    /// reader, and sends a fresh snapshot after dropping a batch that did not fit. One watcher
    /// at a time (a new one replaces the last); the channel closes when the engine stops.
    pub fn watch_kv_events(
        &self,
        capacity: usize,
    ) -> tokio::sync::mpsc::Receiver<Vec<crate::kv::KvEvent>> {
        let (sink, events) = tokio::sync::mpsc::channel(capacity.max(1));
        let _ = self.shared.commands.send(Command::WatchKvEvents { sink });
        events
    }

    /// The engine steps that run traced requests ([`EngineRequest::with_trace`]) from now on
    /// ([`crate::step_trace`]). At most `capacity` steps wait in the channel; the engine
    /// thread never waits for the reader and drops a step that does not fit. One watcher at a
    /// time (a new one replaces the last); the channel closes when the engine stops.
    pub fn watch_steps(
        &self,
        capacity: usize,
    ) -> tokio::sync::mpsc::Receiver<crate::step_trace::StepTrace> {
        let (sink, steps) = tokio::sync::mpsc::channel(capacity.max(1));
        let _ = self.shared.commands.send(Command::WatchSteps { sink });
        steps
    }

    /// What a request must fit (vocabulary, context limit): pass it to [`EngineRequest::new`].
    pub fn limits(&self) -> RequestLimits {
        self.shared.limits
    }

    /// Checks that `spec` compiles for this engine's model (call it before `submit`, so a bad
    /// grammar is refused before it is queued).
    pub fn validate_grammar(&self, spec: &GrammarSpec) -> Result<(), ConstraintError> {
        match &self.shared.constraints {
            Some(factory) => factory.validate(spec),
            None => Err(ConstraintError::Unavailable),
        }
    }

    /// The latest snapshot of the engine's counters (refreshed after every step).
    pub fn stats(&self) -> EngineStats {
        // The lock only guards a plain copy; a poisoned lock still holds a valid snapshot.
        *self.shared.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the LoRA adapter at `path` (PEFT directory or llama.cpp adapter GGUF) as
    /// `name` and loads it, evicting an unused adapter beyond `max_cpu_loras`. Blocks until the
    /// engine thread has done it (use `spawn_blocking` from async code).
    pub fn load_adapter(&self, name: &str, path: PathBuf) -> Result<AdapterCard, AdapterError> {
        let (reply, rx) = mpsc::channel();
        let name = name.to_string();
        self.command(Command::LoadAdapter { name, path, reply }, rx)
    }

    /// Unloads the adapter called `name`. Refused with [`AdapterError::InUse`] while running
    /// or waiting requests use it. Blocks like [`EngineHandle::load_adapter`].
    pub fn unload_adapter(&self, name: &str) -> Result<(), AdapterError> {
        let (reply, rx) = mpsc::channel();
        let name = name.to_string();
        self.command(Command::UnloadAdapter { name, reply }, rx)
    }

    fn command<T>(
        &self,
        cmd: Command,
        rx: mpsc::Receiver<Result<T, AdapterError>>,
    ) -> Result<T, AdapterError> {
        if self.shared.stopping.load(Ordering::Acquire) {
            return Err(AdapterError::Stopped);
        }
        self.shared
            .commands
            .send(cmd)
            .map_err(|_| AdapterError::Stopped)?;
        rx.recv().map_err(|_| AdapterError::Stopped)?
    }

    /// The final hidden state of the last token of `tokens` (after the final norm, not
    /// normalised), computed on the engine thread between steps. Blocks the caller (use
    /// `spawn_blocking` from async code).
    pub fn embed(&self, tokens: Vec<u32>) -> Result<Vec<f32>, PromptPassError> {
        if self.shared.stopping.load(Ordering::Acquire) {
            return Err(PromptPassError::Stopped);
        }
        let (reply, rx) = mpsc::channel();
        self.shared
            .commands
            .send(Command::Embed { tokens, reply })
            .map_err(|_| PromptPassError::Stopped)?;
        rx.recv().map_err(|_| PromptPassError::Stopped)?
    }

    /// For each token of `tokens`, its log-probability given the tokens before it and the
    /// `top_n` likeliest tokens there (`None` for the first token), under `adapter` when given;
    /// computed on the engine thread between steps. Blocks the caller (use `spawn_blocking`
    /// from async code).
    pub fn prompt_logprobs(
        &self,
        tokens: Vec<u32>,
        top_n: usize,
        adapter: Option<AdapterId>,
    ) -> PromptScores {
        if self.shared.stopping.load(Ordering::Acquire) {
            return Err(PromptPassError::Stopped);
        }
        let (reply, rx) = mpsc::channel();
        let cmd = Command::PromptLogprobs {
            tokens,
            top_n,
            adapter,
            reply,
        };
        self.shared
            .commands
            .send(cmd)
            .map_err(|_| PromptPassError::Stopped)?;
        rx.recv().map_err(|_| PromptPassError::Stopped)?
    }

    /// The registered LoRA adapters (as of the engine's latest load, unload or eviction).
    pub fn adapters(&self) -> Vec<AdapterCard> {
        self.shared
            .adapters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The id of the registered adapter called `name`, for [`EngineRequest::with_adapter`].
    pub fn adapter_id(&self, name: &str) -> Option<AdapterId> {
        self.shared
            .adapters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.id)
    }

    /// The configuration the engine was started with.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Whether the engine thread is still running. False once it stopped, after
    /// [`EngineHandle::shutdown`] or because a step panicked (every request in flight then
    /// failed with [`EngineFailure::Internal`]); a supervisor should replace the process.
    pub fn is_alive(&self) -> bool {
        let thread = self.shared.thread.lock().unwrap_or_else(|p| p.into_inner());
        thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops admitting requests, lets in-flight ones finish until `deadline` from now, then
    /// fails the rest with `EngineFailure::ShuttingDown`, and joins the engine thread. Blocks
    /// the caller (use `spawn_blocking` from async code). Later calls return at once.
    pub fn shutdown(&self, deadline: Duration) {
        let s = &self.shared;
        s.stopping.store(true, Ordering::Release);
        let deadline = Instant::now() + deadline;
        let _ = s.commands.send(Command::Shutdown { deadline });
        let thread = s.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            if t.join().is_err() {
                tracing::error!("the engine thread panicked");
            }
        }
    }
}

/// One slot of `max_concurrent_requests`, released when dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn acquire(count: &Arc<AtomicUsize>, limit: Option<usize>) -> Result<InFlight, SubmitError> {
        let limit = limit.unwrap_or(usize::MAX);
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map_err(|_| SubmitError::Overloaded(limit))?;
        Ok(InFlight(count.clone()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The events of one request: tokens, then exactly one `Finished` or `Failed`. Dropping it
/// before the end aborts the request (its KV blocks are freed on the engine's next step).
pub struct ResponseStream {
    id: RequestId,
    events: UnboundedReceiver<EngineEvent>,
    commands: mpsc::Sender<Command>,
    permit: Option<InFlight>,
    done: bool,
    /// The engine's admission answer, for requests with a first-token objective.
    admitted: Option<oneshot::Receiver<Admission>>,
}

impl ResponseStream {
    /// The engine's id for this request.
    pub fn request_id(&self) -> u64 {
        self.id
    }

    /// Takes the admission answer: for a request with a first-token objective, a future that
    /// resolves once the engine thread queued the request (`Ok`) or refused it (the failure,
    /// which the event stream carries too); `None` for other requests, which are queued
    /// unconditionally.
    pub fn take_admission(
        &mut self,
    ) -> Option<impl std::future::Future<Output = Admission> + Send + 'static> {
        let rx = self.admitted.take()?;
        Some(async move {
            rx.await.unwrap_or_else(|_| {
                Err(EngineFailure::Internal(
                    "the engine stopped before admitting the request".into(),
                ))
            })
        })
    }

    /// Waits for the admission answer (see [`Self::take_admission`]); `Ok` at once for a
    /// request without an objective.
    pub async fn admitted(&mut self) -> Admission {
        match self.take_admission() {
            Some(answer) => answer.await,
            None => Ok(()),
        }
    }

    /// The next event; `None` after `Finished` or `Failed`.
    pub async fn next(&mut self) -> Option<EngineEvent> {
        if self.done {
            return None;
        }
        let ev = self.events.recv().await;
        self.observe(ev)
    }

    /// Like [`ResponseStream::next`], blocking the thread; must not be called from async code.
    pub fn blocking_next(&mut self) -> Option<EngineEvent> {
        if self.done {
            return None;
        }
        let ev = self.events.blocking_recv();
        self.observe(ev)
    }

    fn observe(&mut self, ev: Option<EngineEvent>) -> Option<EngineEvent> {
        // The engine closed the stream without a final event: its thread died.
        let ev = ev.or(Some(EngineEvent::Failed(EngineFailure::Internal(
            "the engine stopped unexpectedly".into(),
        ))));
        let end = !matches!(ev, Some(EngineEvent::Token(_)));
        if end {
            self.done = true;
            self.permit = None;
        }
        ev
    }
}

impl Drop for ResponseStream {
    fn drop(&mut self) {
        if !self.done {
            // Fails only when the engine thread is gone, and then there is nothing to abort.
            let _ = self.commands.send(Command::Abort(self.id));
        }
    }
}
