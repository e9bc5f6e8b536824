//! The worker's periodic duties, once per heartbeat interval:
//!
//! * announce itself: its [`WorkerStatus`] under a key that expires after three intervals,
//!   the model descriptor if Redis lost it, and its claim on the served name
//!   ([`crate::binding`]);
//! * keep its own pending entries fresh (`XCLAIM ... JUSTID` to itself resets their idle time,
//!   without counting a delivery), so that only entries of a dead worker grow idle;
//! * claim entries idle past `claim_idle` (`XAUTOCLAIM`): their worker died. Each is re-run as
//!   its next attempt, or given up once delivered more than `max_deliveries` times;
//! * take work routed to other workers that waits too long or outlives them
//!   ([`super::orphans`]);
//! * look for cancellations it may have missed on the pub/sub channel.

use std::sync::Arc;

use redis::streams::StreamAutoClaimReply;
use redis::RedisError;

use super::jobs::{Entry, Jobs};
use super::{intake, WorkerShared};
use crate::protocol::{ResultEvent, WorkerStatus};

/// Runs until `shared.stopping` is set; then removes the heartbeat.
pub async fn run(shared: Arc<WorkerShared>, jobs: Arc<Jobs>) {
    let mut ticker = tokio::time::interval(shared.config.heartbeat);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !shared.is_stopping() {
        ticker.tick().await;
        if let Err(e) = beat(&shared, &jobs).await {
            tracing::warn!(error = %e, "heartbeat failed");
            continue;
        }
        if let Err(e) = touch(&shared, &jobs).await {
            tracing::warn!(error = %e, "refreshing pending entries failed");
        }
        if let Err(e) = check_cancelled(&shared, &jobs).await {
            tracing::warn!(error = %e, "checking cancellations failed");
        }
        if !shared.is_stopping() {
            if let Err(e) = reclaim(&shared, &jobs, &shared.queues()).await {
                tracing::warn!(error = %e, "claiming entries of dead workers failed");
            }
            if let Err(e) = super::orphans::adopt(&shared, &jobs).await {
                tracing::warn!(error = %e, "taking work routed to other workers failed");
            }
        }
    }
}

pub async fn beat(shared: &WorkerShared, jobs: &Jobs) -> Result<(), RedisError> {
    let stats = shared.host.stats();
    let status = WorkerStatus {
        worker_id: shared.worker_id.clone(),
        model: shared.identity().clone(),
        max_num_seqs: shared.max_num_seqs,
        active: jobs.len(),
        running: stats.running,
        waiting: stats.waiting,
        kv_usage: stats.kv_usage,
        prefix_block_size: shared.prefix_block_size(),
        adapters: match shared.host.current() {
            Some(engine) => super::model_host::announced(&engine),
            None => shared.adapters.clone(),
        },
        state: Some(shared.host.state().as_str().to_string()),
    };
    let json = serde_json::to_string(&status).unwrap_or_default();
    let ttl_ms = shared.config.heartbeat.as_millis() as u64 * 3;
    let mut conn = shared.redis.conn();
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg(shared.keys.worker(&shared.worker_id))
        .arg(json)
        .arg("PX")
        .arg(ttl_ms)
        .ignore();
    // The prefix-cache events outlive a missed heartbeat or two, not the worker.
    pipe.cmd("PEXPIRE")
        .arg(shared.keys.kv_events(&shared.worker_id))
        .arg(ttl_ms * super::kv_publisher::TTL_BEATS)
        .ignore();
    pipe.query_async::<()>(&mut conn).await?;
    own_streams(shared).await?;
    let known: bool = redis::cmd("EXISTS")
        .arg(shared.keys.model(shared.identity()))
        .query_async(&mut conn)
        .await?;
    if known {
        let claim = crate::binding::claim(&shared.redis, &shared.keys, shared.identity()).await?;
        shared.record_claim(claim);
    } else {
        super::announce_model(shared).await?;
    }
    Ok(())
}

/// Makes sure the streams routed to this worker exist with the workers' group, and that it is
/// listed among the routed workers (another worker removes both once it takes this one for
/// dead; only after the heartbeat above are they safe from that).
pub async fn own_streams(shared: &WorkerShared) -> Result<(), RedisError> {
    for band in crate::keys::Band::ALL {
        let own = shared
            .keys
            .worker_requests(shared.identity(), &shared.worker_id, band);
        crate::redis_io::ensure_group(&shared.redis, &shared.keys, &own).await?;
    }
    redis::cmd("SADD")
        .arg(shared.keys.routed(shared.identity()))
        .arg(&shared.worker_id)
        .query_async::<()>(&mut shared.redis.conn())
        .await
}

async fn touch(shared: &WorkerShared, jobs: &Jobs) -> Result<(), RedisError> {
    let mut conn = shared.redis.conn();
    for (stream, ids) in jobs.entries_by_stream() {
        redis::cmd("XCLAIM")
            .arg(stream)
            .arg(shared.keys.group())
            .arg(&shared.worker_id)
            .arg(0)
            .arg(&ids)
            .arg("JUSTID")
            .query_async::<redis::Value>(&mut conn)
            .await?;
    }
    Ok(())
}

async fn check_cancelled(shared: &WorkerShared, jobs: &Jobs) -> Result<(), RedisError> {
    let requests = jobs.request_ids();
    if requests.is_empty() {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    for r in &requests {
        pipe.cmd("EXISTS").arg(shared.keys.cancelled(r));
    }
    let mut conn = shared.redis.conn();
    let found: Vec<bool> = pipe.query_async(&mut conn).await?;
    for (request, cancelled) in requests.iter().zip(found) {
        if cancelled {
            jobs.cancel(request);
        }
    }
    Ok(())
}

/// Claims entries of `streams` idle past `claim_idle` (their worker died) and runs them as
/// their next attempt, or gives them up after `max_deliveries`.
pub async fn reclaim(
    shared: &Arc<WorkerShared>,
    jobs: &Arc<Jobs>,
    streams: &[String],
) -> Result<(), RedisError> {
    let mut conn = shared.redis.conn();
    for stream in streams {
        let free = intake::free_slots(shared, jobs);
        if free == 0 {
            return Ok(());
        }
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(stream)
            .arg(shared.keys.group())
            .arg(&shared.worker_id)
            .arg(shared.config.claim_idle.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(free)
            .query_async(&mut conn)
            .await?;
        for item in reply.claimed {
            let here = deliveries(shared, stream, &item.id).await?;
            // Runs before the job was queued again into this entry count too.
            let total = here.saturating_add(intake::prior_deliveries(&item));
            tracing::warn!(entry = %item.id, deliveries = total, "claimed a job of a dead worker");
            if total > shared.config.max_deliveries {
                give_up(jobs, stream, &item, total).await;
            } else {
                intake::start(jobs, stream, item, here).await;
            }
        }
    }
    Ok(())
}

/// How often the entry has been delivered (this claim included).
async fn deliveries(shared: &WorkerShared, stream: &str, id: &str) -> Result<u32, RedisError> {
    let mut conn = shared.redis.conn();
    let pending: redis::streams::StreamPendingCountReply = redis::cmd("XPENDING")
        .arg(stream)
        .arg(shared.keys.group())
        .arg(id)
        .arg(id)
        .arg(1)
        .query_async(&mut conn)
        .await?;
    Ok(pending
        .ids
        .first()
        .map_or(1, |p| u32::try_from(p.times_delivered).unwrap_or(u32::MAX)))
}

async fn give_up(jobs: &Jobs, stream: &str, item: &redis::streams::StreamId, deliveries: u32) {
    let entry = Entry {
        stream: stream.to_string(),
        id: item.id.clone(),
    };
    let request = item
        .get::<String>(crate::protocol::FIELD)
        .and_then(|json| serde_json::from_str::<crate::protocol::Job>(&json).ok())
        .map(|job| job.id);
    tracing::error!(entry = %entry.id, deliveries, "giving up on a job that keeps failing");
    match request {
        Some(request) => {
            let event = ResultEvent::GaveUp { deliveries };
            jobs.finish_with(&entry, &request, deliveries, event).await;
        }
        None => jobs.ack(&entry).await,
    }
}
