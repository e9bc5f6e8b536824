//! [`Registry`]: the gateway's view of the fleet, refreshed a few times a second from Redis:
//! the live workers (their heartbeat keys), the identity each served name is bound to, and the
//! queue depth of each bound model's priority bands (entries no worker has taken: stream
//! length minus pending entries, over the shared stream and those routed to live workers). It feeds `/health` (with a note per refused worker or
//! model without workers), admission (no worker of the model: 503; queue full: 429) and the
//! gateway's gauges, labelled by model.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kestrel_server::model_slot::ModelState;
use redis::RedisError;

use crate::binding::{bindings, live_workers};
use crate::identity::ModelIdentity;
use crate::keys::{Band, Keys};
use crate::metrics::{LIVE_WORKERS, QUEUE_DEPTH, REFUSED_WORKERS};
use crate::protocol::WorkerStatus;
use crate::redis_io::Redis;

/// How often the view is refreshed.
pub const REFRESH: Duration = Duration::from_millis(250);

/// The fleet as last seen.
#[derive(Debug, Clone)]
pub struct FleetView {
    /// Every worker with a current heartbeat, refused ones included.
    pub workers: Vec<WorkerStatus>,
    /// The identity each served name is bound to, in name order.
    pub bound: Vec<ModelIdentity>,
    /// Queued, untaken entries per band (high, normal, low) of each bound model.
    pub depth: HashMap<ModelIdentity, [usize; 3]>,
    /// Since when no worker of an identity the gateway has seen has been alive (absent while
    /// one is, and for identities never seen).
    pub gone_since: HashMap<ModelIdentity, Instant>,
    /// When the view began (the time without workers of an identity never seen counts
    /// from here).
    pub started: Instant,
    /// Whether Redis answered the last refresh.
    pub redis_ok: bool,
}

impl Default for FleetView {
    fn default() -> Self {
        FleetView {
            workers: Vec::new(),
            bound: Vec::new(),
            depth: HashMap::new(),
            gone_since: HashMap::new(),
            started: Instant::now(),
            redis_ok: false,
        }
    }
}

impl FleetView {
    /// Live workers of `model`.
    pub fn workers_of<'a>(
        &'a self,
        model: &'a ModelIdentity,
    ) -> impl Iterator<Item = &'a WorkerStatus> + 'a {
        self.workers.iter().filter(move |w| w.model == *model)
    }

    /// The state of `model` across its live workers: loaded where any has it in memory,
    /// else loading where any is loading it, else unloaded (none has it, or none is left).
    pub fn model_state(&self, model: &ModelIdentity) -> ModelState {
        self.workers_of(model)
            .map(WorkerStatus::model_state)
            .min_by_key(|s| s.start_rank())
            .unwrap_or(ModelState::Unloaded)
    }

    /// Live workers of a bound identity: those requests can reach.
    pub fn serving_workers(&self) -> impl Iterator<Item = &WorkerStatus> + '_ {
        self.workers
            .iter()
            .filter(|w| self.bound.contains(&w.model))
    }

    /// Live workers whose name the fleet serves as another identity, with that identity
    /// (`None`: their name is not bound yet, a moment after they started).
    pub fn refused(&self) -> impl Iterator<Item = (&WorkerStatus, Option<&ModelIdentity>)> + '_ {
        self.workers
            .iter()
            .filter(|w| !self.bound.contains(&w.model))
            .map(|w| (w, self.bound.iter().find(|b| b.name == w.model.name)))
    }

    /// Untaken entries of `model` over all bands.
    pub fn depth_of(&self, model: &ModelIdentity) -> usize {
        self.depth.get(model).map_or(0, |d| d.iter().sum())
    }

    /// Untaken entries over every model and band.
    pub fn total_depth(&self) -> usize {
        self.depth.values().flatten().sum()
    }

    /// Since when no worker of `model` has been alive; `None` while one is.
    pub fn no_worker_since(&self, model: &ModelIdentity) -> Option<Instant> {
        if self.workers_of(model).next().is_some() {
            return None;
        }
        Some(self.gone_since.get(model).copied().unwrap_or(self.started))
    }

    /// What an operator should know, one line each: refused workers, models without workers.
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .refused()
            .filter_map(|(w, holder)| {
                let holder = holder?;
                Some(format!(
                    "worker {} announces model `{}` as fingerprint {} but the fleet serves `{}` \
                     as {} ({} live worker(s)): refused, it takes no job (give it another \
                     --served-model-name, or stop the other workers to switch)",
                    w.worker_id,
                    w.model.name,
                    w.model.short(),
                    holder.name,
                    holder.short(),
                    self.workers_of(holder).count()
                ))
            })
            .collect();
        for model in &self.bound {
            if self.workers_of(model).next().is_none() {
                notes.push(format!(
                    "model `{}` ({model}) has no live worker",
                    model.name
                ));
            }
        }
        notes
    }
}

/// The shared, refreshed view.
#[derive(Default)]
pub struct Registry {
    view: RwLock<FleetView>,
    /// Signalled when a refresh finds the bindings changed.
    pub rebound: tokio::sync::Notify,
}

impl Registry {
    /// The latest view.
    pub fn view(&self) -> FleetView {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn update(&self, f: impl FnOnce(&mut FleetView)) {
        f(&mut self.view.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// Refreshes the view until the task is dropped.
    pub async fn run(self: Arc<Self>, redis: Redis, keys: Keys) {
        let mut refused_before: HashSet<(String, String)> = HashSet::new();
        loop {
            match refresh(&redis, &keys).await {
                Ok(seen) => {
                    let mut changed = false;
                    self.update(|v| changed = apply(v, seen, Instant::now()));
                    if changed {
                        self.rebound.notify_waiters();
                    }
                    let view = self.view();
                    export(&view);
                    refused_before = log_refusals(&view, refused_before);
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

/// One refresh's reading of Redis.
struct Seen {
    workers: Vec<WorkerStatus>,
    bound: Vec<ModelIdentity>,
    depth: HashMap<ModelIdentity, [usize; 3]>,
}

/// Folds a reading into the view, tracking since when each identity has had no worker;
/// true when the bindings changed.
fn apply(view: &mut FleetView, seen: Seen, now: Instant) -> bool {
    let known: HashSet<ModelIdentity> = view
        .gone_since
        .keys()
        .cloned()
        .chain(view.workers.iter().map(|w| w.model.clone()))
        .chain(seen.bound.iter().cloned())
        .collect();
    let live: HashSet<&ModelIdentity> = seen.workers.iter().map(|w| &w.model).collect();
    let started = view.started;
    let mut gone_since = HashMap::new();
    for model in known {
        if live.contains(&model) {
            continue;
        }
        // Never seen alive by this gateway: counted from its start.
        let was_live = view.workers.iter().any(|w| w.model == model);
        let since = match view.gone_since.get(&model) {
            Some(t) => *t,
            None if was_live => now,
            None => started,
        };
        gone_since.insert(model, since);
    }
    let rebound = view.bound != seen.bound;
    view.workers = seen.workers;
    view.bound = seen.bound;
    view.depth = seen.depth;
    view.gone_since = gone_since;
    view.redis_ok = true;
    rebound
}

/// Sets the gateway's gauges from `view`.
fn export(view: &FleetView) {
    for model in &view.bound {
        let name = model.name.clone();
        let depth = view.depth.get(model).copied().unwrap_or_default();
        for (band, d) in Band::ALL.iter().zip(depth) {
            metrics::gauge!(QUEUE_DEPTH, "priority" => band.as_str(), "model_name" => name.clone())
                .set(d as f64);
        }
        metrics::gauge!(LIVE_WORKERS, "model_name" => name.clone())
            .set(view.workers_of(model).count() as f64);
        let refused = view
            .refused()
            .filter(|(w, _)| w.model.name == model.name)
            .count();
        metrics::gauge!(REFUSED_WORKERS, "model_name" => name).set(refused as f64);
    }
}

/// Logs each worker refused since the last refresh; returns the refused set.
fn log_refusals(view: &FleetView, before: HashSet<(String, String)>) -> HashSet<(String, String)> {
    let mut now = HashSet::new();
    for (worker, holder) in view.refused() {
        let Some(holder) = holder else { continue };
        let key = (worker.worker_id.clone(), worker.model.fingerprint.clone());
        if !before.contains(&key) {
            tracing::error!(
                worker = %worker.worker_id,
                announces = %worker.model,
                fingerprint = %worker.model.fingerprint,
                served_as = %holder.fingerprint,
                "refused a worker: it announces a served name with another model identity \
                 (weights, quantization, tokenizer, template or limits); it gets no job"
            );
        }
        now.insert(key);
    }
    now
}

async fn refresh(redis: &Redis, keys: &Keys) -> Result<Seen, RedisError> {
    let workers = live_workers(redis, keys).await?;
    let bound = bindings(redis, keys).await?;
    // Each band's streams: the shared one and those of the model's routable live workers.
    let mut streams: Vec<(usize, usize, String)> = Vec::new();
    for (m, model) in bound.iter().enumerate() {
        for (b, band) in Band::ALL.into_iter().enumerate() {
            streams.push((m, b, keys.requests(model, band)));
            let routable = workers
                .iter()
                .filter(|w| w.model == *model && w.prefix_block_size.is_some());
            for w in routable {
                streams.push((m, b, keys.worker_requests(model, &w.worker_id, band)));
            }
        }
    }
    let mut conn = redis.conn();
    let mut pipe = redis::pipe();
    // A routed stream may be missing for a moment (a worker recreating it): its error counts
    // as 0 instead of failing the refresh.
    pipe.ignore_errors();
    for (_, _, stream) in &streams {
        pipe.cmd("XLEN").arg(stream);
        pipe.cmd("XPENDING").arg(stream).arg(keys.group());
    }
    let replies: Vec<redis::Value> = if streams.is_empty() {
        Vec::new()
    } else {
        let replies: Vec<redis::RedisResult<redis::Value>> = pipe.query_async(&mut conn).await?;
        replies
            .into_iter()
            .map(|r| r.unwrap_or(redis::Value::Nil))
            .collect()
    };
    let mut depth: HashMap<ModelIdentity, [usize; 3]> = bound
        .iter()
        .map(|model| (model.clone(), [0usize; 3]))
        .collect();
    for (i, (m, b, _)) in streams.iter().enumerate() {
        let untaken = untaken(replies.get(2 * i), replies.get(2 * i + 1));
        if let Some(d) = depth.get_mut(&bound[*m]) {
            d[*b] += untaken;
        }
    }
    Ok(Seen {
        workers,
        bound,
        depth,
    })
}

/// Stream length minus pending entries (an error reply, e.g. no group yet, counts as 0).
fn untaken(len: Option<&redis::Value>, pending: Option<&redis::Value>) -> usize {
    let len: usize = len
        .and_then(|v| redis::from_redis_value_ref(v).ok())
        .unwrap_or(0);
    let pending: usize = match pending {
        Some(redis::Value::Array(items)) => items
            .first()
            .and_then(|v| redis::from_redis_value_ref(v).ok())
            .unwrap_or(0),
        _ => 0,
    };
    len.saturating_sub(pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, fp: char) -> ModelIdentity {
        ModelIdentity {
            name: name.into(),
            fingerprint: fp.to_string().repeat(64),
        }
    }

    fn worker(name: &str, model: &ModelIdentity) -> WorkerStatus {
        WorkerStatus {
            worker_id: name.into(),
            model: model.clone(),
            max_num_seqs: 4,
            active: 0,
            running: 1,
            waiting: 0,
            kv_usage: 0.5,
            prefix_block_size: None,
            adapters: Vec::new(),
            state: None,
        }
    }

    fn seen(workers: Vec<WorkerStatus>, bound: Vec<ModelIdentity>) -> Seen {
        Seen {
            workers,
            bound,
            depth: HashMap::new(),
        }
    }

    #[test]
    fn a_worker_of_another_fingerprint_is_refused_and_noted() {
        let a = id("a", '1');
        let a2 = id("a", '2');
        let b = id("b", '3');
        let mut view = FleetView::default();
        let workers = vec![worker("w1", &a), worker("w2", &b), worker("w3", &a2)];
        apply(
            &mut view,
            seen(workers, vec![a.clone(), b.clone()]),
            Instant::now(),
        );
        let refused: Vec<_> = view
            .refused()
            .map(|(w, h)| (w.worker_id.clone(), h.cloned()))
            .collect();
        assert_eq!(refused, vec![("w3".to_string(), Some(a.clone()))]);
        assert_eq!(view.workers_of(&a).count(), 1);
        assert_eq!(view.serving_workers().count(), 2);
        let notes = view.notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("worker w3") && notes[0].contains("refused"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_model_whose_workers_left_is_counted_from_their_departure() {
        let a = id("a", '1');
        let b = id("b", '2');
        let t0 = Instant::now();
        let mut view = FleetView::default();
        apply(
            &mut view,
            seen(vec![worker("w1", &a)], vec![a.clone(), b.clone()]),
            t0,
        );
        assert_eq!(view.no_worker_since(&a), None);
        assert_eq!(
            view.no_worker_since(&b),
            Some(view.started),
            "never seen: since the start"
        );
        let t1 = t0 + Duration::from_secs(5);
        apply(&mut view, seen(vec![], vec![a.clone(), b.clone()]), t1);
        assert_eq!(view.no_worker_since(&a), Some(t1));
        // Later refreshes keep the first moment, also after the name is bound elsewhere.
        let a2 = id("a", '9');
        apply(
            &mut view,
            seen(vec![worker("w2", &a2)], vec![a2.clone(), b.clone()]),
            t1 + Duration::from_secs(5),
        );
        assert_eq!(view.no_worker_since(&a), Some(t1));
        assert_eq!(view.no_worker_since(&a2), None);
        assert!(view.notes().iter().any(|n| n.contains("model `b`")));
    }

    #[test]
    fn depth_is_per_model() {
        let a = id("a", '1');
        let b = id("b", '2');
        let mut view = FleetView::default();
        let mut s = seen(vec![], vec![a.clone(), b.clone()]);
        s.depth.insert(a.clone(), [1, 2, 3]);
        s.depth.insert(b.clone(), [0, 4, 0]);
        apply(&mut view, s, Instant::now());
        assert_eq!(view.depth_of(&a), 6);
        assert_eq!(view.depth_of(&b), 4);
        assert_eq!(view.total_depth(), 10);
        assert_eq!(view.depth_of(&id("c", '3')), 0);
    }
}
