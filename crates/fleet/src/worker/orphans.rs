//! Work the gateway routed to another worker of this model (to the stream of its own, where
//! its cached prefix is) that this worker takes over, so nothing routed is lost:
//!
//! * entries the other worker took and left pending past `claim_idle`: it died (claimed as in
//!   [`super::upkeep::reclaim`], with the same delivery count and `max_deliveries` rule);
//! * entries nobody took yet, of a worker without a heartbeat: all of them;
//! * entries nobody took yet that have waited past `claim_idle` at a live worker: it is full
//!   (only those; fresher ones stay for the worker that holds their prefix).
//!
//! Once a dead worker's streams are empty its streams and its place in the set
//! [`crate::keys::Keys::routed`] are removed in one script that checks again that it has no
//! heartbeat, atomic with the gateway's enqueue script (which re-adds both), so no entry is
//! ever queued where nobody looks. A worker recreates its streams and its place after each
//! heartbeat, in case it was taken for dead while it stalled.

use std::collections::HashSet;
use std::sync::Arc;

use redis::streams::{StreamInfoGroupsReply, StreamRangeReply};
use redis::RedisError;

use super::jobs::Jobs;
use super::{intake, upkeep, WorkerShared};
use crate::keys::Band;
use crate::protocol::unix_ms;

/// Removes the streams `KEYS[2..n-1]` and `ARGV[1]` from the set `KEYS[n]` if the worker's
/// heartbeat `KEYS[1]` is (still) absent and every stream is empty; returns 1 if it did.
const FORGET: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 2, #KEYS - 1 do
  if redis.call('XLEN', KEYS[i]) > 0 then return 0 end
end
for i = 2, #KEYS - 1 do redis.call('DEL', KEYS[i]) end
redis.call('SREM', KEYS[#KEYS], ARGV[1])
return 1
";

/// Takes over what other workers of the model cannot do (see the module docs).
pub async fn adopt(shared: &Arc<WorkerShared>, jobs: &Arc<Jobs>) -> Result<(), RedisError> {
    let mut conn = shared.redis.conn();
    let routed: Vec<String> = redis::cmd("SMEMBERS")
        .arg(shared.keys.routed(shared.identity()))
        .query_async(&mut conn)
        .await?;
    let others: Vec<String> = routed
        .into_iter()
        .filter(|w| *w != shared.worker_id)
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    let live: HashSet<String> = crate::binding::live_workers(&shared.redis, &shared.keys)
        .await?
        .into_iter()
        .map(|w| w.worker_id)
        .collect();
    for other in others {
        let streams: Vec<String> = Band::ALL
            .iter()
            .map(|b| shared.keys.worker_requests(shared.identity(), &other, *b))
            .collect();
        let alive = live.contains(&other);
        for stream in &streams {
            match adopt_from(shared, jobs, stream, alive).await {
                // A band's stream the gateway never wrote to since it was removed.
                Err(e) if e.code() == Some("NOGROUP") => {}
                other => other?,
            }
        }
        if !alive {
            forget(shared, &other, &streams).await?;
        }
    }
    Ok(())
}

/// Claims the stale pending entries of one of another worker's streams, then takes its
/// untaken ones (see [`take_waiting`]); an empty or missing stream is skipped.
async fn adopt_from(
    shared: &Arc<WorkerShared>,
    jobs: &Arc<Jobs>,
    stream: &str,
    alive: bool,
) -> Result<(), RedisError> {
    let len: usize = redis::cmd("XLEN")
        .arg(stream)
        .query_async(&mut shared.redis.conn())
        .await?;
    if len == 0 {
        return Ok(());
    }
    upkeep::reclaim(shared, jobs, &[stream.to_string()]).await?;
    take_waiting(shared, jobs, stream, alive).await
}

/// Takes the untaken entries of `stream`: all of a dead worker's, those older than
/// `claim_idle` of a live one.
async fn take_waiting(
    shared: &Arc<WorkerShared>,
    jobs: &Arc<Jobs>,
    stream: &str,
    alive: bool,
) -> Result<(), RedisError> {
    let free = intake::free_slots(shared, jobs);
    if free == 0 {
        return Ok(());
    }
    let mut conn = shared.redis.conn();
    let count = if alive {
        stale_untaken(shared, stream, free).await?
    } else {
        free
    };
    if count == 0 {
        return Ok(());
    }
    let taken = intake::read_group(shared, &mut conn, &[stream.to_string()], count, None).await?;
    for (stream, item) in taken {
        tracing::warn!(entry = %item.id, %stream, alive, "took a job routed to another worker");
        intake::start(jobs, &stream, item, 1).await;
    }
    Ok(())
}

/// How many of the first `at_most` untaken entries of `stream` have waited past
/// `claim_idle` (entry ids begin with their Unix milliseconds).
async fn stale_untaken(
    shared: &WorkerShared,
    stream: &str,
    at_most: usize,
) -> Result<usize, RedisError> {
    let mut conn = shared.redis.conn();
    let groups: StreamInfoGroupsReply = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async(&mut conn)
        .await?;
    let group = shared.keys.group();
    let Some(last) = groups.groups.iter().find(|g| g.name == group) else {
        return Ok(0);
    };
    let untaken: StreamRangeReply = redis::cmd("XRANGE")
        .arg(stream)
        .arg(format!("({}", last.last_delivered_id))
        .arg("+")
        .arg("COUNT")
        .arg(at_most)
        .query_async(&mut conn)
        .await?;
    let cutoff = unix_ms().saturating_sub(shared.config.claim_idle.as_millis() as u64);
    Ok(untaken
        .ids
        .iter()
        .take_while(|item| queued_ms(&item.id).is_some_and(|ms| ms <= cutoff))
        .count())
}

/// The Unix milliseconds an entry id (`ms-seq`) begins with.
fn queued_ms(id: &str) -> Option<u64> {
    id.split('-').next()?.parse().ok()
}

/// Removes a dead worker's empty streams and its place among the routed workers.
async fn forget(shared: &WorkerShared, worker: &str, streams: &[String]) -> Result<(), RedisError> {
    let mut conn = shared.redis.conn();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(FORGET)
        .arg(streams.len() + 2)
        .arg(shared.keys.worker(worker))
        .arg(streams)
        .arg(shared.keys.routed(shared.identity()))
        .arg(worker);
    let forgot: i64 = cmd.query_async(&mut conn).await?;
    if forgot == 1 {
        tracing::info!(%worker, "forgot the streams of a dead worker");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_id_begins_with_its_milliseconds() {
        assert_eq!(queued_ms("1700000000123-4"), Some(1_700_000_000_123));
        assert_eq!(queued_ms("junk"), None);
    }
}
