//! Taking work: read new entries from the request streams through the consumer group, highest
//! band first, and only as many as the engine can start now (free sequence slots, nothing
//! waiting in the engine). What the worker does not take stays in Redis, where the queue depth
//! shows it and any other worker can take it.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::streams::{StreamId, StreamReadReply};
use redis::RedisError;

use super::jobs::{Entry, Jobs};
use super::WorkerShared;
use crate::keys::Band;
use crate::protocol::{Job, FIELD};

/// Longest a blocking read waits before looking at capacity and shutdown again.
const BLOCK: Duration = Duration::from_millis(250);

/// Runs until `shared.stopping` is set.
pub async fn run(shared: Arc<WorkerShared>, jobs: Arc<Jobs>) {
    let mut conn: Option<MultiplexedConnection> = None;
    while !shared.is_stopping() {
        let free = free_slots(&shared, &jobs);
        if free == 0 {
            let _ = tokio::time::timeout(Duration::from_millis(50), jobs.freed.notified()).await;
            continue;
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match shared.redis.dedicated(BLOCK).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach redis; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            },
        };
        match take(&shared, c, free).await {
            Ok(entries) => {
                for (band, item) in entries {
                    start(&jobs, band, item, 1).await;
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
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Sequence slots the engine has free, or 0 while requests wait inside it.
pub fn free_slots(shared: &WorkerShared, jobs: &Jobs) -> usize {
    if shared.engine.stats().waiting > 0 {
        return 0;
    }
    shared.max_num_seqs.saturating_sub(jobs.len())
}

/// Up to `free` new entries: without blocking from each band in order; if all are empty, one
/// blocking read over all bands.
async fn take(
    shared: &WorkerShared,
    conn: &mut MultiplexedConnection,
    free: usize,
) -> Result<Vec<(Band, StreamId)>, RedisError> {
    let mut taken = Vec::new();
    for band in Band::ALL {
        let want = free - taken.len();
        if want == 0 {
            break;
        }
        let reply = read_group(shared, conn, &[band], want, None).await?;
        taken.extend(reply);
    }
    if taken.is_empty() {
        taken = read_group(shared, conn, &Band::ALL, 1, Some(BLOCK)).await?;
    }
    Ok(taken)
}

async fn read_group(
    shared: &WorkerShared,
    conn: &mut MultiplexedConnection,
    bands: &[Band],
    count: usize,
    block: Option<Duration>,
) -> Result<Vec<(Band, StreamId)>, RedisError> {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(shared.keys.group())
        .arg(&shared.worker_id)
        .arg("COUNT")
        .arg(count);
    if let Some(block) = block {
        cmd.arg("BLOCK").arg(block.as_millis() as u64);
    }
    cmd.arg("STREAMS");
    for band in bands {
        cmd.arg(shared.keys.requests(shared.identity(), *band));
    }
    for _ in bands {
        cmd.arg(">");
    }
    let reply: Option<StreamReadReply> = cmd.query_async(conn).await?;
    let mut out = Vec::new();
    for key in reply.map(|r| r.keys).unwrap_or_default() {
        let Some(band) = bands
            .iter()
            .copied()
            .find(|b| shared.keys.requests(shared.identity(), *b) == key.key)
        else {
            continue;
        };
        out.extend(key.ids.into_iter().map(|id| (band, id)));
    }
    Ok(out)
}

/// Decodes an entry and starts its job; an undecodable entry is acknowledged and dropped (no
/// worker could ever run it).
pub async fn start(jobs: &Arc<Jobs>, band: Band, item: StreamId, attempt: u32) {
    let entry = Entry {
        band,
        id: item.id.clone(),
    };
    let job = item
        .get::<String>(FIELD)
        .ok_or_else(|| format!("no `{FIELD}` field"))
        .and_then(|json| serde_json::from_str::<Job>(&json).map_err(|e| e.to_string()));
    match job {
        Ok(job) => jobs.start(entry, job, attempt).await,
        Err(e) => {
            tracing::error!(entry = %entry.id, error = %e, "dropping an undecodable queue entry");
            jobs.ack(&entry).await;
        }
    }
}
