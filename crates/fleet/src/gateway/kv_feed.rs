//! The KV feed: reads the prefix-cache event streams ([`crate::kv_events`]) of the live workers
//! that publish them into the router's [`PrefixIndex`](super::prefix_index::PrefixIndex).
//!
//! ```text
//! registry view (live workers with a prefix block size)
//!   new worker  ─► forget what the index had of it, read its stream from the start
//!   gone worker ─► forget its blocks (its heartbeat expired: it died or stopped)
//! XREAD BLOCK over every followed stream ─► decode ─► index.apply(worker, events)
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadReply;
use redis::RedisError;

use super::GatewayShared;
use crate::kv_events::KvEventEntry;
use crate::metrics::{PREFIX_INDEX_BLOCKS, PREFIX_INDEX_WORKERS};
use crate::protocol::FIELD;

/// Longest one blocking read waits before the set of workers is looked at again.
const BLOCK: Duration = Duration::from_millis(250);

/// Follows the workers' event streams until the task is dropped.
pub async fn run(shared: Arc<GatewayShared>) {
    // Worker id -> the last entry read of its stream.
    let mut cursors: HashMap<String, String> = HashMap::new();
    let mut conn: Option<MultiplexedConnection> = None;
    loop {
        follow_live(&shared, &mut cursors);
        export(&shared);
        if cursors.is_empty() {
            tokio::time::sleep(super::registry::REFRESH).await;
            continue;
        }
        let Some(c) = shared
            .redis
            .dedicated_in(&mut conn, BLOCK, "the KV feed")
            .await
        else {
            continue;
        };
        if let Err(e) = read(&shared, c, &mut cursors).await {
            tracing::warn!(error = %e, "reading prefix-cache events failed");
            conn = None;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Starts following workers that appeared and forgets those that are gone.
fn follow_live(shared: &GatewayShared, cursors: &mut HashMap<String, String>) {
    let view = shared.registry.view();
    if !view.redis_ok {
        return;
    }
    let live: Vec<String> = view
        .serving_workers()
        .filter(|w| w.prefix_block_size.is_some())
        .map(|w| w.worker_id.clone())
        .collect();
    let mut index = shared
        .router
        .index
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    cursors.retain(|worker, _| {
        let alive = live.contains(worker);
        if !alive {
            tracing::info!(%worker, "worker gone: forgetting its cached blocks");
            index.forget(worker);
        }
        alive
    });
    for worker in live {
        cursors.entry(worker).or_insert_with_key(|worker| {
            index.forget(worker);
            "0-0".to_string()
        });
    }
}

/// One blocking read over every followed stream, applied to the index.
async fn read(
    shared: &GatewayShared,
    conn: &mut MultiplexedConnection,
    cursors: &mut HashMap<String, String>,
) -> Result<(), RedisError> {
    let workers: Vec<String> = cursors.keys().cloned().collect();
    let mut cmd = redis::cmd("XREAD");
    cmd.arg("COUNT")
        .arg(256)
        .arg("BLOCK")
        .arg(BLOCK.as_millis() as u64)
        .arg("STREAMS");
    for w in &workers {
        cmd.arg(shared.keys.kv_events(w));
    }
    for w in &workers {
        cmd.arg(&cursors[w]);
    }
    let reply: Option<StreamReadReply> = cmd.query_async(conn).await?;
    for key in reply.map(|r| r.keys).unwrap_or_default() {
        let Some(worker) = workers.iter().find(|w| shared.keys.kv_events(w) == key.key) else {
            continue;
        };
        let mut decoded = Vec::new();
        let mut last = None;
        for item in key.ids {
            let entry = item
                .get::<String>(FIELD)
                .and_then(|json| serde_json::from_str::<KvEventEntry>(&json).ok());
            match entry {
                Some(entry) => decoded.extend(entry.decode()),
                None => tracing::warn!(%worker, entry = %item.id, "undecodable KV event entry"),
            }
            last = Some(item.id);
        }
        let mut index = shared
            .router
            .index
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        index.apply(worker, &decoded);
        drop(index);
        if let Some(last) = last {
            cursors.insert(worker.clone(), last);
        }
    }
    Ok(())
}

fn export(shared: &GatewayShared) {
    let index = shared
        .router
        .index
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    metrics::gauge!(PREFIX_INDEX_BLOCKS).set(index.num_blocks() as f64);
    metrics::gauge!(PREFIX_INDEX_WORKERS).set(index.num_workers() as f64);
}
