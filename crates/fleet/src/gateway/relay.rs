//! [`relay`]: the life of one request at the gateway. Queue the job on its band's stream (the
//! shared one, or the one of the worker the router picked), then
//! follow the request's result stream and pass the events to the client's [`EventStream`]
//! through a [`Splice`] (a re-run after a worker died repeats tokens the client has). When the
//! client goes away, tell the workers to cancel.
//!
//! [`EventStream`]: kestrel_server::backend::EventStream

use std::sync::Arc;
use std::time::{Duration, Instant};

use kestrel_engine::api::{EngineEvent, EngineFailure};
use kestrel_engine::handle::Admission;
use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadReply;
use redis::RedisError;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use super::routing::{Route, Routed};
use super::splice::{Splice, Step};
use super::GatewayShared;
use crate::identity::ModelIdentity;
use crate::keys::Band;
use crate::metrics::{
    E2E_REQUEST_LATENCY_SECONDS, REDELIVERIES_TOTAL, TIME_TO_FIRST_TOKEN_SECONDS,
};
use crate::protocol::{Job, ResultEntry, ResultEvent, FIELD};
use crate::redis_io::retry_for;

/// Longest one blocking read of the result stream waits.
const BLOCK: Duration = Duration::from_millis(1000);
/// How long Redis may stay unreachable before the request fails.
const REDIS_PATIENCE: Duration = Duration::from_secs(30);

/// Enqueues on a worker's own stream: creates the stream with the workers' group if it is
/// missing (a worker that left may have had it removed), records the worker among the routed
/// ones (so others take the entry if it cannot), and appends. `KEYS`: stream, routed set;
/// `ARGV`: group, worker, field, JSON. One script, so it cannot interleave with a worker
/// removing a dead worker's empty streams.
const ENQUEUE_ROUTED: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
end
redis.call('SADD', KEYS[2], ARGV[2])
return redis.call('XADD', KEYS[1], '*', ARGV[3], ARGV[4])
";

/// Where the answer to a request's admission goes (requests with a first-token objective): a
/// worker's `Started` admits it, a failure before that refuses it.
type Admit = Option<oneshot::Sender<Admission>>;

/// Runs one request to its end (or its client's departure).
pub async fn relay(
    shared: Arc<GatewayShared>,
    model: ModelIdentity,
    job: Job,
    mut routed: Routed,
    events: UnboundedSender<EngineEvent>,
    mut admit: Admit,
) {
    let start = Instant::now();
    let request = job.id.clone();
    let ended = tokio::select! {
        ended = follow(&shared, &model, job, &mut routed, &events, &mut admit, start) => ended,
        () = events.closed() => false,
    };
    if !ended {
        cancel(&shared, &request).await;
    }
    let mut conn = shared.redis.conn();
    let _ = redis::cmd("DEL")
        .arg(shared.keys.results(&request))
        .query_async::<()>(&mut conn)
        .await;
    shared.finished();
}

/// Queues the job and forwards its results; true once a last event reached the client.
async fn follow(
    shared: &GatewayShared,
    model: &ModelIdentity,
    job: Job,
    routed: &mut Routed,
    events: &UnboundedSender<EngineEvent>,
    admit: &mut Admit,
    start: Instant,
) -> bool {
    let request = job.id.clone();
    let request_id = job.request_id.clone().unwrap_or_default();
    if let Err(e) = enqueue(shared, model, &job, &routed.route).await {
        let failure = EngineFailure::Internal(format!("cannot queue the request: {e}"));
        send_last(events, admit, failure);
        return true;
    }
    let mut splice = Splice::default();
    let mut reader = ResultReader::new(shared, &request);
    let mut first_token = true;
    loop {
        let entries = match reader.next().await {
            Ok(entries) => entries,
            Err(e) => {
                let failure =
                    EngineFailure::Internal(format!("lost the connection to the queue: {e}"));
                send_last(events, admit, failure);
                return true;
            }
        };
        if entries.is_empty() {
            if let Some(failure) = stranded(shared, model) {
                send_last(events, admit, failure);
                return true;
            }
            continue;
        }
        for entry in entries {
            if splice.is_repeat(entry.attempt, entry.seq) {
                tracing::debug!(%request, attempt = entry.attempt, seq = ?entry.seq, "dropped a repeated result entry");
                continue;
            }
            if splice.is_rerun(entry.attempt) {
                metrics::counter!(REDELIVERIES_TOTAL).increment(1);
                tracing::warn!(%request, %request_id, attempt = entry.attempt, resent = splice.sent(), "request re-run after a worker failure");
            }
            let event = match entry.event {
                ResultEvent::Started { worker } => {
                    routed.started(&worker);
                    tracing::debug!(%request, %request_id, %worker, attempt = entry.attempt, "started");
                    if let Some(admit) = admit.take() {
                        let _ = admit.send(Ok(()));
                    }
                    continue;
                }
                ResultEvent::Engine(event) => {
                    routed.progressed();
                    event
                }
                ResultEvent::Rejected { message } => EngineEvent::Failed(EngineFailure::Internal(
                    format!("the worker refused the request: {message}"),
                )),
                ResultEvent::GaveUp { deliveries } => EngineEvent::Failed(EngineFailure::Internal(
                    format!("the request was delivered {deliveries} times and its worker failed each time; giving up"),
                )),
                ResultEvent::Pass(_) => EngineEvent::Failed(EngineFailure::Internal(
                    "a worker answered a generation with a one-pass result".into(),
                )),
            };
            let event = match splice.step(entry.attempt, event) {
                Step::Skip => continue,
                Step::Forward(event) => event,
                Step::Diverged(failure) => EngineEvent::Failed(failure),
            };
            let last = !matches!(event, EngineEvent::Token(_));
            if let Some(tx) = admit.take() {
                // An event before any worker started the job: a failure refuses it (the
                // engine's admission check, a worker's rejection).
                let _ = tx.send(match &event {
                    EngineEvent::Failed(failure) => Err(failure.clone()),
                    _ => Ok(()),
                });
            }
            if first_token && !last {
                first_token = false;
                metrics::histogram!(TIME_TO_FIRST_TOKEN_SECONDS)
                    .record(start.elapsed().as_secs_f64());
            }
            if events.send(event).is_err() {
                return false;
            }
            if last {
                metrics::histogram!(E2E_REQUEST_LATENCY_SECONDS)
                    .record(start.elapsed().as_secs_f64());
                return true;
            }
        }
    }
}

/// Ends the request with `failure`: as the answer to its admission if that is still open,
/// and as its last event.
fn send_last(events: &UnboundedSender<EngineEvent>, admit: &mut Admit, failure: EngineFailure) {
    if let Some(tx) = admit.take() {
        let _ = tx.send(Err(failure.clone()));
    }
    let _ = events.send(EngineEvent::Failed(failure));
}

/// Puts the job on its model's stream of its band: the shared one, or the routed worker's.
pub(super) async fn enqueue(
    shared: &GatewayShared,
    model: &ModelIdentity,
    job: &Job,
    route: &Route,
) -> Result<(), RedisError> {
    let json = serde_json::to_string(job).map_err(|e| {
        RedisError::from((
            redis::ErrorKind::Client,
            "cannot encode the job",
            e.to_string(),
        ))
    })?;
    let band = Band::of(job.priority);
    let cmd = match &route.worker {
        None => redis::cmd("XADD")
            .arg(shared.keys.requests(model, band))
            .arg("*")
            .arg(FIELD)
            .arg(&json)
            .clone(),
        Some(worker) => redis::cmd("EVAL")
            .arg(ENQUEUE_ROUTED)
            .arg(2)
            .arg(shared.keys.worker_requests(model, worker, band))
            .arg(shared.keys.routed(model))
            .arg(shared.keys.group())
            .arg(worker)
            .arg(FIELD)
            .arg(&json)
            .clone(),
    };
    let conn = shared.redis.conn();
    retry_for(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        let cmd = cmd.clone();
        async move { cmd.query_async::<String>(&mut conn).await }
    })
    .await
    .map(|_| ())
}

/// Follows one request's result stream in order: each read waits up to [`BLOCK`], a failed
/// read drops the connection and retries on a fresh one every 200 ms, and a queue that stays
/// unreachable for [`REDIS_PATIENCE`] ends the reading with its last error.
pub(super) struct ResultReader<'a> {
    shared: &'a GatewayShared,
    request: &'a str,
    last_id: String,
    conn: Option<MultiplexedConnection>,
    failing_since: Option<Instant>,
}

impl<'a> ResultReader<'a> {
    pub(super) fn new(shared: &'a GatewayShared, request: &'a str) -> Self {
        ResultReader {
            shared,
            request,
            last_id: "0-0".to_string(),
            conn: None,
            failing_since: None,
        }
    }

    /// The entries after those already returned (empty when the wait ran out), or the error
    /// of a queue unreachable for longer than [`REDIS_PATIENCE`].
    pub(super) async fn next(&mut self) -> Result<Vec<ResultEntry>, RedisError> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                match self.shared.redis.dedicated(BLOCK).await {
                    Ok(c) => self.conn = Some(c),
                    Err(e) => self.failed(e).await?,
                }
                continue;
            };
            match read(self.shared, conn, self.request, &self.last_id).await {
                Ok(entries) => {
                    self.failing_since = None;
                    if let Some((id, _)) = entries.last() {
                        self.last_id = id.clone();
                    }
                    return Ok(entries.into_iter().map(|(_, entry)| entry).collect());
                }
                Err(e) => self.failed(e).await?,
            }
        }
    }

    /// Drops the connection after `e`; waits before the next try, or gives `e` back once the
    /// queue has failed for longer than [`REDIS_PATIENCE`].
    async fn failed(&mut self, e: RedisError) -> Result<(), RedisError> {
        self.conn = None;
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() > REDIS_PATIENCE {
            return Err(e);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(())
    }
}

/// New entries of the request's result stream after `last_id`, waiting up to [`BLOCK`].
async fn read(
    shared: &GatewayShared,
    conn: &mut MultiplexedConnection,
    request: &str,
    last_id: &str,
) -> Result<Vec<(String, ResultEntry)>, RedisError> {
    let reply: Option<StreamReadReply> = redis::cmd("XREAD")
        .arg("COUNT")
        .arg(256)
        .arg("BLOCK")
        .arg(BLOCK.as_millis() as u64)
        .arg("STREAMS")
        .arg(shared.keys.results(request))
        .arg(last_id)
        .query_async(conn)
        .await?;
    let mut out = Vec::new();
    for key in reply.map(|r| r.keys).unwrap_or_default() {
        for item in key.ids {
            let Some(json) = item.get::<String>(FIELD) else {
                continue;
            };
            match serde_json::from_str::<ResultEntry>(&json) {
                Ok(entry) => out.push((item.id, entry)),
                Err(e) => tracing::error!(error = %e, "undecodable result entry"),
            }
        }
    }
    Ok(out)
}

/// A failure when no worker of `model` has been alive for longer than the gateway waits for
/// one.
pub(super) fn stranded(shared: &GatewayShared, model: &ModelIdentity) -> Option<EngineFailure> {
    let since = shared.registry.view().no_worker_since(model)?;
    (since.elapsed() > shared.config.no_worker_timeout).then(|| {
        EngineFailure::Internal(format!(
            "no inference worker of model {model} has been alive for {} s; the request stays \
             unserved",
            since.elapsed().as_secs()
        ))
    })
}

/// Tells the workers that the client went away.
pub(super) async fn cancel(shared: &GatewayShared, request: &str) {
    let mut conn = shared.redis.conn();
    let ttl = shared.config.result_ttl.as_secs().max(1);
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg(shared.keys.cancelled(request))
        .arg(1)
        .arg("EX")
        .arg(ttl)
        .ignore()
        .cmd("PUBLISH")
        .arg(shared.keys.cancel_channel())
        .arg(request)
        .ignore();
    if let Err(e) = pipe.query_async::<()>(&mut conn).await {
        tracing::warn!(error = %e, %request, "cannot publish a cancellation");
    }
}
