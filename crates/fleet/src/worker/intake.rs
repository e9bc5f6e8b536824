//! Taking work: read new entries from the request streams through the consumer group, highest
//! band first (in each band, the stream routed to this worker before the shared one), and only
//! as many as the engine can start now (free sequence slots, nothing waiting in the engine).
//!
//! The shared streams are for whichever worker can start a request soonest, and compute, not
//! sequence slots, decides that: a worker takes a shared entry only while the prompt tokens of
//! its jobs that have not had their first token fit in one engine step
//! (`max_num_batched_tokens`), and one entry at a time. So a burst of long prompts is spread
//! over the workers instead of queueing behind one another in the first worker that reads
//! them. Entries routed to this worker are taken whenever it has free slots (the gateway
//! weighed its queue when it routed them).
//!
//! A model loaded on demand ([`super::model_host`]) that is not loaded reads nothing: while an
//! entry waits in one of its streams it asks for the model (unloading idle ones of the process
//! to make room), and reads once it is loaded. Without room it leaves the entries to the
//! model's other workers and asks again later.
//!
//! What the worker does not take stays in Redis, where the queue depth shows it and any other
//! worker can take it (a routed entry once it has waited `claim_idle`, see
//! [`super::orphans`]).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::streams::{StreamId, StreamInfoGroupsReply, StreamRangeReply, StreamReadReply};
use redis::RedisError;

use super::jobs::{Entry, Jobs};
use super::model_host::Held;
use super::WorkerShared;
use crate::protocol::{Job, FIELD};

/// Longest a blocking read waits before looking at capacity and shutdown again.
const BLOCK: Duration = Duration::from_millis(250);
/// How often a worker whose prefill budget is spent looks at its own streams.
const BUSY_POLL: Duration = Duration::from_millis(20);
/// How long a model loaded on demand that could not be loaded waits before asking again.
const NO_ROOM_PAUSE: Duration = Duration::from_secs(1);

/// Runs until `shared.stopping` is set.
pub async fn run(shared: Arc<WorkerShared>, jobs: Arc<Jobs>) {
    let mut conn: Option<MultiplexedConnection> = None;
    while !shared.is_stopping() {
        let free = free_slots(&shared, &jobs);
        if free == 0 {
            let _ = tokio::time::timeout(Duration::from_millis(50), jobs.freed.notified()).await;
            continue;
        }
        // Held through this round's read, so the model stays loaded until its jobs hold it.
        let _warm = match warm_up(&shared).await {
            Ok(held) => held,
            Err(pause) => {
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        let Some(c) = shared
            .redis
            .dedicated_in(&mut conn, BLOCK, "the request streams")
            .await
        else {
            continue;
        };
        let open = shared_intake_open(&shared, &jobs);
        match take(&shared, c, free, open).await {
            Ok(entries) if entries.is_empty() && !open => {
                let _ = tokio::time::timeout(BUSY_POLL, jobs.freed.notified()).await;
            }
            Ok(entries) => {
                for (stream, item) in entries {
                    start(&jobs, &stream, item, 1).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the request streams failed; reconnecting");
                conn = None;
                if e.code() == Some("NOGROUP") {
                    let _ = crate::redis_io::ensure_groups(
                        &shared.redis,
                        &shared.keys,
                        shared.identity(),
                    )
                    .await;
                    let _ = super::upkeep::own_streams(&shared).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// For a model loaded on demand that is not loaded: loads it when work waits in its streams
/// (`Ok`, holding it), else `Err` with how long to wait before asking again. `Ok(None)` for a
/// loaded model.
async fn warm_up(shared: &WorkerShared) -> Result<Option<Held>, Duration> {
    if !shared.host.on_demand() || shared.host.current().is_some() {
        return Ok(None);
    }
    match has_untaken(shared).await {
        Ok(true) => {}
        Ok(false) => return Err(BLOCK),
        Err(e) => {
            tracing::warn!(error = %e, "cannot look at the request streams");
            return Err(NO_ROOM_PAUSE);
        }
    }
    match shared.host.hold().await {
        Ok(held) => Ok(Some(held)),
        Err(e) => {
            tracing::info!(reason = %e, "work waits for this model but it cannot be loaded now");
            Err(NO_ROOM_PAUSE)
        }
    }
}

/// Whether an entry nobody has taken waits in one of this worker's streams.
async fn has_untaken(shared: &WorkerShared) -> Result<bool, RedisError> {
    let mut conn = shared.redis.conn();
    let group = shared.keys.group();
    for queue in shared.queues() {
        let groups: Result<StreamInfoGroupsReply, RedisError> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&queue)
            .query_async(&mut conn)
            .await;
        // A stream nobody has written to yet.
        let Ok(groups) = groups else { continue };
        let Some(g) = groups.groups.iter().find(|g| g.name == group) else {
            continue;
        };
        let untaken: StreamRangeReply = redis::cmd("XRANGE")
            .arg(&queue)
            .arg(format!("({}", g.last_delivered_id))
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await?;
        if !untaken.ids.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Sequence slots the engine has free, or 0 while requests wait inside it.
pub fn free_slots(shared: &WorkerShared, jobs: &Jobs) -> usize {
    if shared.host.stats().waiting > 0 {
        return 0;
    }
    shared.max_num_seqs.saturating_sub(jobs.len())
}

/// Whether this worker may take an entry of the shared streams now: the prompts it has not
/// prefilled yet fit in one engine step.
pub fn shared_intake_open(shared: &WorkerShared, jobs: &Jobs) -> bool {
    jobs.pending_prefill_tokens() < shared.descriptor.max_num_batched_tokens.max(1)
}

/// New entries, band by band: up to `free` from this worker's own streams, and, when
/// `shared_open`, at most one from the shared streams. Without blocking from each queue in
/// order; if all are empty and the shared streams are open, one blocking read over all of
/// them (a closed worker polls its own streams instead, see [`BUSY_POLL`]).
async fn take(
    shared: &WorkerShared,
    conn: &mut MultiplexedConnection,
    free: usize,
    shared_open: bool,
) -> Result<Vec<(String, StreamId)>, RedisError> {
    let own = shared.own_queues();
    let queues: Vec<String> = shared
        .queues()
        .into_iter()
        .filter(|q| shared_open || own.contains(q))
        .collect();
    let mut taken = Vec::new();
    let mut shared_taken = 0;
    for queue in &queues {
        let is_own = own.contains(queue);
        let want = match is_own {
            true => free - taken.len(),
            false => (free - taken.len()).min(1 - shared_taken),
        };
        if want == 0 {
            continue;
        }
        let reply = read_group(shared, conn, std::slice::from_ref(queue), want, None).await?;
        if !is_own {
            shared_taken += reply.len();
        }
        taken.extend(reply);
    }
    if taken.is_empty() && shared_open {
        taken = read_group(shared, conn, &queues, 1, Some(BLOCK)).await?;
    }
    Ok(taken)
}

/// New entries of `streams` (`XREADGROUP ... >`), each with its stream's name.
pub async fn read_group<C: redis::aio::ConnectionLike + Send>(
    shared: &WorkerShared,
    conn: &mut C,
    streams: &[String],
    count: usize,
    block: Option<Duration>,
) -> Result<Vec<(String, StreamId)>, RedisError> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(shared.keys.group())
        .arg(&shared.worker_id)
        .arg("COUNT")
        .arg(count);
    if let Some(block) = block {
        cmd.arg("BLOCK").arg(block.as_millis() as u64);
    }
    cmd.arg("STREAMS").arg(streams);
    for _ in streams {
        cmd.arg(">");
    }
    let reply: Option<StreamReadReply> = cmd.query_async(conn).await?;
    Ok(reply
        .map(|r| r.keys)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|key| {
            let stream = key.key;
            key.ids.into_iter().map(move |id| (stream.clone(), id))
        })
        .collect())
}

/// The deliveries an entry's job had before it was queued again (see
/// [`Job::prior_deliveries`]); 0 for an undecodable entry.
pub fn prior_deliveries(item: &StreamId) -> u32 {
    item.get::<String>(FIELD)
        .and_then(|json| serde_json::from_str::<Job>(&json).ok())
        .map_or(0, |job| job.prior_deliveries)
}

/// Decodes an entry of `stream`, delivered `deliveries` times in it, and starts its job (as
/// attempt `deliveries` + its prior deliveries); an undecodable entry is acknowledged and
/// dropped (no worker could ever run it).
pub async fn start(jobs: &Arc<Jobs>, stream: &str, item: StreamId, deliveries: u32) {
    let entry = Entry {
        stream: stream.to_string(),
        id: item.id.clone(),
    };
    let job = item
        .get::<String>(FIELD)
        .ok_or_else(|| format!("no `{FIELD}` field"))
        .and_then(|json| serde_json::from_str::<Job>(&json).map_err(|e| e.to_string()));
    match job {
        Ok(job) => {
            let attempt = deliveries.saturating_add(job.prior_deliveries);
            jobs.start(entry, job, attempt).await
        }
        Err(e) => {
            tracing::error!(entry = %entry.id, error = %e, "dropping an undecodable queue entry");
            jobs.ack(&entry).await;
        }
    }
}
