//! [`Jobs`]: the requests this worker has taken from Redis and not finished. Each runs in a task
//! that streams the engine's events to the request's result stream, then acknowledges the queue
//! entry: only after the last event is published, so a worker that dies earlier leaves the entry
//! pending for another worker to claim.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::api::{EngineEvent, EngineFailure, SubmitError};
use kestrel_engine::handle::EngineHandle;
use kestrel_server::otel::RequestTrace;
use redis::aio::ConnectionManager;
use tokio::sync::{oneshot, Notify};
use tracing::Instrument;

use super::model_host::{Held, ModelHost};
use super::requeue::Requeued;
use crate::identity::ModelIdentity;
use crate::keys::Band;
use crate::keys::Keys;
use crate::metrics::WORKER_FOREIGN_JOBS_TOTAL;
use crate::pass::{PassFailure, PassResult, TokenScore};
use crate::protocol::JobKind;
use crate::protocol::{Job, ResultEntry, ResultEvent, FIELD};
use crate::redis_io::{retry_for, Redis};
use kestrel_server::model_registry::RegistryError;

/// How long publishing one event may keep failing before the run is given up (the entry stays
/// pending, so another worker re-runs it).
const PUBLISH_PATIENCE: Duration = Duration::from_secs(30);

/// A queue entry: which stream (a shared band's, or one routed to a worker), which id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub stream: String,
    pub id: String,
}

struct Active {
    entry: Entry,
    /// Its engine, held (a model loaded on demand stays loaded) until the job ends.
    _held: Held,
    cancel: Option<oneshot::Sender<()>>,
    /// Its prompt tokens until its first event comes back (its prefill is done), then 0.
    prefill_tokens: usize,
}

/// The jobs in progress, shared by the intake, upkeep and cancellation tasks.
pub struct Jobs {
    host: Arc<ModelHost>,
    redis: Redis,
    conn: ConnectionManager,
    keys: Keys,
    /// The model this worker serves: its queues, and the only identity its jobs may carry.
    model: ModelIdentity,
    worker_id: String,
    result_ttl: Duration,
    /// How long a job for a LoRA adapter no live worker serves waits when its request set no
    /// queue time.
    adapter_wait: Duration,
    active: Mutex<HashMap<String, Active>>,
    /// Signalled whenever a job ends (a slot is free) or finishes its prefill.
    pub freed: Notify,
}

impl Jobs {
    pub fn new(
        host: Arc<ModelHost>,
        redis: Redis,
        keys: Keys,
        model: ModelIdentity,
        worker_id: String,
        (result_ttl, adapter_wait): (Duration, Duration),
    ) -> Arc<Jobs> {
        Arc::new(Jobs {
            host,
            conn: redis.conn(),
            redis,
            keys,
            model,
            worker_id,
            result_ttl,
            adapter_wait,
            active: Mutex::new(HashMap::new()),
            freed: Notify::new(),
        })
    }

    /// Jobs in progress.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no job is in progress.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Prompt tokens of the jobs in progress that have not had their first event: the
    /// prefill queued in the engine (counting whole prompts: their cached prefixes are not
    /// known before the engine schedules them).
    pub fn pending_prefill_tokens(&self) -> usize {
        self.lock().values().map(|a| a.prefill_tokens).sum()
    }

    /// The queue entries of the jobs in progress, by stream.
    pub fn entries_by_stream(&self) -> HashMap<String, Vec<String>> {
        let mut out: HashMap<String, Vec<String>> = HashMap::new();
        for a in self.lock().values() {
            out.entry(a.entry.stream.clone())
                .or_default()
                .push(a.entry.id.clone());
        }
        out
    }

    /// The request ids in progress.
    pub fn request_ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Asks the job of `request` to stop (its client went away); false if it is not here.
    pub fn cancel(&self, request: &str) -> bool {
        let sender = self.lock().get_mut(request).and_then(|a| a.cancel.take());
        match sender {
            Some(tx) => tx.send(()).is_ok(),
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Active>> {
        // The map holds plain data; a panic elsewhere cannot leave it half-updated.
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `job` (its `attempt`-th delivery) from `entry`. A job prepared for another model
    /// identity, a cancelled, invalid or engine-refused job ends here; the rest run in their
    /// own task, in a `job` span naming the request and the client's `request_id` (so every
    /// log line of the job carries both).
    pub async fn start(self: &Arc<Self>, entry: Entry, job: Job, attempt: u32) {
        let span = tracing::info_span!(
            "job",
            request = %job.id,
            request_id = job.request_id.as_deref().unwrap_or_default(),
            attempt
        );
        if let Some(why) = crate::identity::mismatch(job.model.as_ref(), &self.model) {
            span.in_scope(|| tracing::error!(entry = %entry.id, "{why}"));
            metrics::counter!(WORKER_FOREIGN_JOBS_TOTAL).increment(1);
            let event = ResultEvent::Rejected { message: why };
            self.finish_with(&entry, &job.id, attempt, event).await;
            return;
        }
        let mut conn = self.conn.clone();
        let cancelled: bool = redis::cmd("EXISTS")
            .arg(self.keys.cancelled(&job.id))
            .query_async(&mut conn)
            .await
            .unwrap_or(false);
        if cancelled {
            self.ack(&entry).await;
            return;
        }
        let held = match self.host.hold().await {
            Ok(held) => held,
            Err(e) => {
                self.no_room(&entry, &job, attempt, e)
                    .instrument(span)
                    .await;
                return;
            }
        };
        let engine = held.engine.clone();
        let adapter = match job.adapter.as_deref() {
            None => None,
            Some(name) => match engine.adapter_id(name) {
                Some(id) => Some(id),
                None => {
                    self.requeue(&entry, &job, name, attempt)
                        .instrument(span)
                        .await;
                    return;
                }
            },
        };
        if !job.kind.is_generate() {
            self.start_pass(entry, job, (attempt, held), adapter, span);
            return;
        }
        let req = match job.to_request(&engine.limits()) {
            Ok(req) => req.with_adapter(adapter),
            Err(e) => {
                span.in_scope(|| tracing::warn!(error = %e, "rejected an invalid job"));
                let event = ResultEvent::Rejected {
                    message: e.to_string(),
                };
                self.finish_with(&entry, &job.id, attempt, event).await;
                return;
            }
        };
        let trace = super::job_trace::start(&job, attempt);
        let req = req.with_trace(trace.as_ref().map(RequestTrace::traceparent));
        let stream = match engine.submit(req) {
            Ok(stream) => stream,
            Err(SubmitError::Overloaded(_)) | Err(SubmitError::Stopped) => {
                // Left pending: this worker or another claims it again later.
                span.in_scope(|| tracing::warn!("engine refused a job; leaving it queued"));
                return;
            }
        };
        let (tx, rx) = oneshot::channel();
        self.lock().insert(
            job.id.clone(),
            Active {
                entry: entry.clone(),
                _held: held,
                cancel: Some(tx),
                prefill_tokens: job.prompt_ids.len(),
            },
        );
        let jobs = self.clone();
        let run = async move {
            jobs.run(entry, job.id, attempt, stream, rx).await;
            // The job's span ends here.
            drop(trace);
        };
        tokio::spawn(run.instrument(span));
    }

    async fn run(
        self: Arc<Self>,
        entry: Entry,
        request: String,
        attempt: u32,
        mut stream: kestrel_engine::handle::ResponseStream,
        mut cancel: oneshot::Receiver<()>,
    ) {
        tracing::info!("running a job");
        if let Some(admission) = stream.take_admission() {
            // A first-token objective: the gateway holds the client's response until the
            // engine admits the job (`Started`) or refuses it (the failure, a 429 there).
            if let Err(failure) = admission.await {
                tracing::info!(%failure, "the engine refused the job at admission");
                let event = ResultEvent::Engine(EngineEvent::Failed(failure));
                drop(stream);
                self.finish_with(&entry, &request, attempt, event).await;
                self.end(&request);
                return;
            }
        }
        let started = ResultEvent::Started {
            worker: self.worker_id.clone(),
        };
        let mut published = self.publish(&request, attempt, 0, started).await;
        let mut seq = 0;
        while published {
            let event = tokio::select! {
                event = stream.next() => event,
                _ = &mut cancel => {
                    tracing::debug!("cancelled by its client");
                    drop(stream);
                    self.ack(&entry).await;
                    self.end(&request);
                    return;
                }
            };
            let Some(event) = event else { break };
            if matches!(event, EngineEvent::Failed(EngineFailure::ShuttingDown)) {
                // This worker is stopping: leave the job pending for another one.
                break;
            }
            let last = !matches!(event, EngineEvent::Token(_));
            if let EngineEvent::Failed(failure) = &event {
                tracing::warn!(%failure, "the job failed");
            }
            if seq == 0 {
                self.prefilled(&request);
            }
            seq += 1;
            published = self
                .publish(&request, attempt, seq, ResultEvent::Engine(event))
                .await;
            if last && published {
                tracing::info!("finished a job");
                self.ack(&entry).await;
                break;
            }
        }
        if !published {
            tracing::error!("cannot publish results; leaving the job for a re-run");
        }
        self.end(&request);
    }

    /// Puts a job whose model cannot be loaded now back on the model's shared stream, for
    /// any worker of the model ([`super::requeue`]); when Redis fails the entry stays pending
    /// here and is claimed again later.
    async fn no_room(&self, entry: &Entry, job: &Job, attempt: u32, why: RegistryError) {
        tracing::info!(reason = %why, "no room for the job's model now; queueing it again for any worker of the model");
        let stream = self.keys.requests(&self.model, Band::of(job.priority));
        let moved = super::requeue::move_job(&self.redis, &self.keys, entry, job, attempt, &stream);
        if let Err(e) = moved.await {
            tracing::warn!(error = %e, "cannot queue the job again; it stays pending");
        }
    }

    /// Sends a job for the LoRA adapter `adapter`, which this worker lacks, to a worker that
    /// has it, or back to its queue, or refuses it once none has come within its queue time
    /// ([`super::requeue`]). When Redis fails the entry stays pending here and is
    /// claimed again later.
    async fn requeue(&self, entry: &Entry, job: &Job, adapter: &str, attempt: u32) {
        let requeue = super::requeue::Requeue {
            redis: &self.redis,
            keys: &self.keys,
            me: &self.worker_id,
            model: &self.model,
            default_wait: self.adapter_wait,
        };
        match requeue.run(entry, job, adapter, attempt).await {
            Ok(Requeued::Moved { worker }) => {
                tracing::info!(%worker, adapter, "queued a job for a LoRA adapter this worker lacks on a worker serving it");
            }
            Ok(Requeued::Parked) => {
                tracing::debug!(
                    adapter,
                    "no live worker serves the job's LoRA adapter yet; queued it again"
                );
            }
            Ok(Requeued::Expired { waited }) => {
                let message = format!(
                    "no live worker of model `{}` serves LoRA adapter `{adapter}` (the worker \
                     that did is gone); waited {} s",
                    self.model.name,
                    waited.as_secs()
                );
                tracing::warn!("{message}");
                let event = ResultEvent::Rejected { message };
                self.finish_with(entry, &job.id, attempt, event).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, adapter, "cannot queue a job for a LoRA adapter again; it stays pending");
            }
        }
    }

    /// Runs a one-pass job (an embedding, prompt logprobs) in its own task: `Started`, then
    /// the pass on the engine thread, then its one answer. A pass the engine could not run
    /// because it is stopping stays queued for another worker.
    fn start_pass(
        self: &Arc<Self>,
        entry: Entry,
        job: Job,
        (attempt, held): (u32, Held),
        adapter: Option<AdapterId>,
        span: tracing::Span,
    ) {
        let engine = held.engine.clone();
        self.lock().insert(
            job.id.clone(),
            Active {
                entry: entry.clone(),
                _held: held,
                cancel: None,
                prefill_tokens: job.prompt_ids.len(),
            },
        );
        let jobs = self.clone();
        let run = async move {
            let started = ResultEvent::Started {
                worker: jobs.worker_id.clone(),
            };
            if jobs.publish(&job.id, attempt, 0, started).await {
                let (kind, prompt) = (job.kind, job.prompt_ids);
                let outcome =
                    tokio::task::spawn_blocking(move || run_pass(&engine, kind, prompt, adapter))
                        .await;
                match outcome {
                    Ok(Some(result)) => {
                        tracing::info!("finished a one-pass job");
                        if jobs
                            .publish(&job.id, attempt, 1, ResultEvent::Pass(result))
                            .await
                        {
                            jobs.ack(&entry).await;
                        }
                    }
                    Ok(None) => tracing::warn!("the engine stopped; leaving the job queued"),
                    Err(e) => tracing::error!(error = %e, "the pass panicked"),
                }
            }
            jobs.end(&job.id);
        };
        tokio::spawn(run.instrument(span));
    }

    /// The job of `request` had its first event: its prefill no longer waits.
    fn prefilled(&self, request: &str) {
        if let Some(a) = self.lock().get_mut(request) {
            a.prefill_tokens = 0;
        }
        self.freed.notify_waiters();
    }

    fn end(&self, request: &str) {
        self.lock().remove(request);
        self.freed.notify_waiters();
    }

    /// Publishes `event` and acknowledges the entry (for jobs that end before running).
    pub async fn finish_with(
        &self,
        entry: &Entry,
        request: &str,
        attempt: u32,
        event: ResultEvent,
    ) {
        if self.publish(request, attempt, 0, event).await {
            self.ack(entry).await;
        }
    }

    /// Appends one event, the `seq`-th of run `attempt`, to the request's result stream (and
    /// refreshes its TTL); false if Redis stayed unreachable.
    async fn publish(&self, request: &str, attempt: u32, seq: u32, event: ResultEvent) -> bool {
        let entry = ResultEntry {
            attempt,
            seq: Some(seq),
            event,
        };
        let json = match serde_json::to_string(&entry) {
            Ok(json) => json,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a result");
                return false;
            }
        };
        let key = self.keys.results(request);
        let ttl = self.result_ttl.as_secs().max(1);
        let mut pipe = redis::pipe();
        pipe.cmd("XADD")
            .arg(&key)
            .arg("*")
            .arg(FIELD)
            .arg(&json)
            .ignore();
        pipe.cmd("EXPIRE").arg(&key).arg(ttl).ignore();
        self.run_patiently(&pipe).await.is_ok()
    }

    /// Runs `pipe`, retrying for up to [`PUBLISH_PATIENCE`].
    async fn run_patiently(&self, pipe: &redis::Pipeline) -> Result<(), redis::RedisError> {
        let conn = self.conn.clone();
        retry_for(PUBLISH_PATIENCE, || {
            let mut conn = conn.clone();
            async move { pipe.query_async::<()>(&mut conn).await }
        })
        .await
    }

    /// Acknowledges and deletes a queue entry: the request is done with.
    pub async fn ack(&self, entry: &Entry) {
        let stream = &entry.stream;
        let mut pipe = redis::pipe();
        pipe.cmd("XACK")
            .arg(stream)
            .arg(self.keys.group())
            .arg(&entry.id)
            .ignore();
        pipe.cmd("XDEL").arg(stream).arg(&entry.id).ignore();
        let done = self.run_patiently(&pipe).await;
        if let Err(e) = done {
            tracing::error!(error = %e, entry = %entry.id, "cannot acknowledge a finished job");
        }
    }
}

/// Runs one pass of `kind` over `prompt` (under `adapter`, for prompt logprobs) on the engine
/// (blocking); `None` when the engine has stopped (the job is left for another worker).
fn run_pass(
    engine: &EngineHandle,
    kind: JobKind,
    prompt: Vec<u32>,
    adapter: Option<AdapterId>,
) -> Option<PassResult> {
    let result =
        match kind {
            JobKind::Embed => engine.embed(prompt).map(PassResult::Embedding),
            JobKind::PromptLogprobs { top_n } => engine
                .prompt_logprobs(prompt, top_n, adapter)
                .map(|scores| {
                    PassResult::Scores(
                        scores
                            .into_iter()
                            .map(|s| s.map(TokenScore::from))
                            .collect(),
                    )
                }),
            JobKind::Generate => {
                return Some(PassResult::Failed(PassFailure {
                    class: crate::pass::FailureClass::Model,
                    message: "a generation is not a one-pass job".into(),
                }))
            }
        };
    match result {
        Ok(answer) => Some(answer),
        Err(kestrel_engine::prompt_pass::PromptPassError::Stopped) => None,
        Err(e) => Some(PassResult::Failed(PassFailure::from(e))),
    }
}
