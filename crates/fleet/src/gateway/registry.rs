//! [`Registry`]: the gateway's view of the fleet, refreshed a few times a second from Redis:
//! the live workers (their heartbeat keys) and the queue depth of each priority band (entries
//! no worker has taken: stream length minus pending entries). It feeds `/health`, admission
//! (no worker: 503; queue full: 429) and the gateway's gauges.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::RedisError;

use crate::keys::{Band, Keys};
use crate::metrics::{LIVE_WORKERS, QUEUE_DEPTH};
use crate::protocol::WorkerStatus;
use crate::redis_io::Redis;

/// How often the view is refreshed.
pub const REFRESH: Duration = Duration::from_millis(250);

/// The fleet as last seen.
#[derive(Debug, Clone, Default)]
pub struct FleetView {
    /// Workers with a current heartbeat that serve the gateway's model.
    pub workers: Vec<WorkerStatus>,
    /// Queued, untaken entries per band (high, normal, low).
    pub depth: [usize; 3],
    /// Since when no worker has been alive (`None` while one is).
    pub no_worker_since: Option<Instant>,
    /// Whether Redis answered the last refresh.
    pub redis_ok: bool,
}

impl FleetView {
    /// Untaken entries over all bands.
    pub fn total_depth(&self) -> usize {
        self.depth.iter().sum()
    }
}

/// The shared, refreshed view.
#[derive(Default)]
pub struct Registry {
    view: RwLock<FleetView>,
}

impl Registry {
    /// The latest view.
    pub fn view(&self) -> FleetView {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn update(&self, f: impl FnOnce(&mut FleetView)) {
        f(&mut self.view.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// Refreshes the view until the task is dropped. `model` filters workers once known.
    pub async fn run(
        self: Arc<Self>,
        redis: Redis,
        keys: Keys,
        model: Arc<dyn Fn() -> Option<String> + Send + Sync>,
    ) {
        let start = Instant::now();
        self.update(|v| v.no_worker_since = Some(start));
        loop {
            match refresh(&redis, &keys).await {
                Ok((mut workers, depth)) => {
                    if let Some(model) = model() {
                        workers.retain(|w| w.model_id == model);
                    }
                    for (band, d) in Band::ALL.iter().zip(depth) {
                        metrics::gauge!(QUEUE_DEPTH, "priority" => band.as_str()).set(d as f64);
                    }
                    metrics::gauge!(LIVE_WORKERS).set(workers.len() as f64);
                    self.update(|v| {
                        v.no_worker_since = match (workers.is_empty(), v.no_worker_since) {
                            (false, _) => None,
                            (true, Some(t)) => Some(t),
                            (true, None) => Some(Instant::now()),
                        };
                        v.workers = workers;
                        v.depth = depth;
                        v.redis_ok = true;
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot refresh the fleet view");
                    self.update(|v| v.redis_ok = false);
                }
            }
            tokio::time::sleep(REFRESH).await;
        }
    }
}

async fn refresh(
    redis: &Redis,
    keys: &Keys,
) -> Result<(Vec<WorkerStatus>, [usize; 3]), RedisError> {
    let mut conn = redis.conn();
    let mut names: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(keys.worker_pattern())
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        names.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut workers = Vec::new();
    if !names.is_empty() {
        let values: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&names)
            .query_async(&mut conn)
            .await?;
        workers.extend(
            values
                .into_iter()
                .flatten()
                .filter_map(|json| serde_json::from_str::<WorkerStatus>(&json).ok()),
        );
    }
    let mut pipe = redis::pipe();
    for band in Band::ALL {
        pipe.cmd("XLEN").arg(keys.requests(band));
        pipe.cmd("XPENDING")
            .arg(keys.requests(band))
            .arg(keys.group());
    }
    let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
    let mut depth = [0usize; 3];
    for (i, d) in depth.iter_mut().enumerate() {
        let len: usize = redis::from_redis_value_ref(&replies[2 * i]).unwrap_or(0);
        let pending: usize = match &replies[2 * i + 1] {
            redis::Value::Array(items) => items
                .first()
                .and_then(|v| redis::from_redis_value_ref(v).ok())
                .unwrap_or(0),
            _ => 0,
        };
        *d = len.saturating_sub(pending);
    }
    Ok((workers, depth))
}
