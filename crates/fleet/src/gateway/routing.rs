//! Routing: which stream a request is queued on.
//!
//! * [`Routing::Shared`]: the model's shared band stream, which any worker reads (the first
//!   free worker takes it).
//! * [`Routing::CacheAware`] (the default): the prompt's block hashes are computed as the
//!   workers' engines compute them ([`EngineRequest::prompt_block_hashes`], with the block
//!   size each worker announces), looked up in the [`PrefixIndex`], and each live worker of
//!   the model is scored by [`choose`]. A worker with a hit and room gets the request on its
//!   own stream; otherwise it goes to the shared stream.
//!
//! Each decision is counted in `kestrel:gateway_routed_requests_total{decision}`:
//! `cache_hit` (to a worker's own stream), `shared` (no worker holds any of the prefix, or
//! shared routing), `fallback` (a worker holds some of it but none that does has room).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use kestrel_engine::api::EngineRequest;

use super::prefix_index::PrefixIndex;
use crate::metrics::{MATCHED_PREFIX_TOKENS_TOTAL, ROUTED_REQUESTS_TOTAL};
use crate::protocol::WorkerStatus;

/// How the gateway picks a request's stream (`--routing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Routing {
    /// To the worker holding the longest cached prefix, when it has room.
    #[default]
    CacheAware,
    /// Always to the shared streams.
    Shared,
}

impl FromStr for Routing {
    type Err = String;

    fn from_str(s: &str) -> Result<Routing, String> {
        match s {
            "cache-aware" => Ok(Routing::CacheAware),
            "shared" => Ok(Routing::Shared),
            other => Err(format!(
                "unknown routing {other:?}: expected `cache-aware` or `shared`"
            )),
        }
    }
}

/// Why a request went where it went (the metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    CacheHit,
    Shared,
    Fallback,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::CacheHit => "cache_hit",
            Decision::Shared => "shared",
            Decision::Fallback => "fallback",
        }
    }
}

/// Where one request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The worker whose own stream gets it; `None`: the shared stream.
    pub worker: Option<String>,
    pub decision: Decision,
    /// Prompt tokens the chosen worker holds (0 on the shared stream).
    pub matched_tokens: usize,
}

impl Route {
    fn shared(decision: Decision) -> Route {
        Route {
            worker: None,
            decision,
            matched_tokens: 0,
        }
    }
}

/// One live worker as the scorer sees it.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    pub status: &'a WorkerStatus,
    /// Leading prompt tokens its cache holds.
    pub matched_tokens: usize,
    /// Requests this gateway routed to it that it has not started yet.
    pub reserved: usize,
}

impl Candidate<'_> {
    /// Sequences it runs or has been sent, over those it can run at once.
    fn load(&self) -> f64 {
        let busy = self.status.active + self.reserved;
        busy as f64 / self.status.max_num_seqs.max(1) as f64
    }

    fn has_room(&self) -> bool {
        self.status.waiting == 0 && self.status.active + self.reserved < self.status.max_num_seqs
    }
}

/// The scorer: among workers with a hit and room, the longest cached prefix wins, ties going
/// to the less loaded (then the lower KV usage). A hit only on workers without room falls
/// back to the shared stream, as does a prompt no worker holds any of.
pub fn choose(candidates: &[Candidate<'_>]) -> Route {
    let hits: Vec<&Candidate> = candidates.iter().filter(|c| c.matched_tokens > 0).collect();
    if hits.is_empty() {
        return Route::shared(Decision::Shared);
    }
    let best = hits.iter().filter(|c| c.has_room()).max_by(|a, b| {
        a.matched_tokens
            .cmp(&b.matched_tokens)
            .then(b.load().total_cmp(&a.load()))
            .then(b.status.kv_usage.total_cmp(&a.status.kv_usage))
    });
    match best {
        Some(c) => Route {
            worker: Some(c.status.worker_id.clone()),
            decision: Decision::CacheHit,
            matched_tokens: c.matched_tokens,
        },
        None => Route::shared(Decision::Fallback),
    }
}

/// The gateway's router: the routing mode, the prefix index the KV feed fills, and the
/// requests routed to each worker that have not started there yet.
pub struct Router {
    pub routing: Routing,
    pub index: Mutex<PrefixIndex>,
    reserved: Arc<Mutex<HashMap<String, usize>>>,
}

impl Router {
    pub fn new(routing: Routing, max_blocks: usize) -> Router {
        Router {
            routing,
            index: Mutex::new(PrefixIndex::new(max_blocks)),
            reserved: Arc::default(),
        }
    }

    /// Where `req` goes among `workers` (the live workers of its model); counted in the
    /// routing metrics. A routed request holds a [`Reservation`] on its worker until the
    /// worker starts it.
    pub fn route(
        &self,
        req: &EngineRequest,
        workers: &[&WorkerStatus],
    ) -> (Route, Option<Reservation>) {
        let route = match self.routing {
            Routing::Shared => Route::shared(Decision::Shared),
            Routing::CacheAware => self.score(req, workers),
        };
        metrics::counter!(ROUTED_REQUESTS_TOTAL, "decision" => route.decision.as_str())
            .increment(1);
        metrics::counter!(MATCHED_PREFIX_TOKENS_TOTAL).increment(route.matched_tokens as u64);
        let reservation = route.worker.as_ref().map(|w| self.reserve(w));
        (route, reservation)
    }

    fn score(&self, req: &EngineRequest, workers: &[&WorkerStatus]) -> Route {
        let reserved = self.lock_reserved().clone();
        let mut hashes_by_size = HashMap::new();
        let index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        let candidates: Vec<Candidate> = workers
            .iter()
            .filter_map(|w| {
                let block_size = w.prefix_block_size.filter(|&b| b > 0)?;
                let hashes = hashes_by_size
                    .entry(block_size)
                    .or_insert_with(|| cacheable(req, block_size));
                let blocks = index.matched_blocks(&w.worker_id, hashes);
                Some(Candidate {
                    status: w,
                    matched_tokens: blocks * block_size,
                    reserved: reserved.get(&w.worker_id).copied().unwrap_or(0),
                })
            })
            .collect();
        drop(index);
        choose(&candidates)
    }

    fn reserve(&self, worker: &str) -> Reservation {
        *self.lock_reserved().entry(worker.to_string()).or_default() += 1;
        Reservation {
            reserved: self.reserved.clone(),
            worker: worker.to_string(),
        }
    }

    fn lock_reserved(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // A map of counts: a panic elsewhere cannot leave it half-updated.
        self.reserved.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The prompt's block hashes an engine can hit: never the block of its last token, which
/// must run through the model (as the engine's own lookup).
fn cacheable(req: &EngineRequest, block_size: usize) -> Vec<kestrel_engine::kv::BlockHash> {
    let mut hashes = req.prompt_block_hashes(block_size);
    let max_blocks = req.prompt_ids().len().saturating_sub(1) / block_size;
    hashes.truncate(max_blocks);
    hashes
}

/// A request routed to a worker and not started there yet; dropping it releases the count.
pub struct Reservation {
    reserved: Arc<Mutex<HashMap<String, usize>>>,
    worker: String,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut map = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.worker) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.worker);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::ModelIdentity;

    fn worker(id: &str, active: usize, kv_usage: f64) -> WorkerStatus {
        WorkerStatus {
            worker_id: id.into(),
            model: ModelIdentity {
                name: "m".into(),
                fingerprint: "f".repeat(64),
            },
            max_num_seqs: 4,
            active,
            running: active,
            waiting: 0,
            kv_usage,
            prefix_block_size: Some(16),
        }
    }

    fn cand(status: &WorkerStatus, matched_tokens: usize) -> Candidate<'_> {
        Candidate {
            status,
            matched_tokens,
            reserved: 0,
        }
    }

    #[test]
    fn the_longest_prefix_with_room_wins() {
        let (a, b, c) = (
            worker("a", 0, 0.1),
            worker("b", 1, 0.1),
            worker("c", 0, 0.1),
        );
        let route = choose(&[cand(&a, 16), cand(&b, 48), cand(&c, 0)]);
        assert_eq!(route.worker.as_deref(), Some("b"));
        assert_eq!(
            (route.decision, route.matched_tokens),
            (Decision::CacheHit, 48)
        );
    }

    #[test]
    fn ties_go_to_the_less_loaded_then_to_lower_kv_usage() {
        let (a, b) = (worker("a", 3, 0.1), worker("b", 1, 0.9));
        assert_eq!(
            choose(&[cand(&a, 32), cand(&b, 32)]).worker.as_deref(),
            Some("b")
        );
        let (c, d) = (worker("c", 1, 0.8), worker("d", 1, 0.2));
        assert_eq!(
            choose(&[cand(&c, 32), cand(&d, 32)]).worker.as_deref(),
            Some("d")
        );
    }

    #[test]
    fn no_hit_is_shared_and_a_hit_only_on_full_workers_falls_back() {
        let (a, b) = (worker("a", 0, 0.0), worker("b", 4, 0.5));
        assert_eq!(
            choose(&[cand(&a, 0), cand(&b, 0)]),
            Route::shared(Decision::Shared)
        );
        assert_eq!(choose(&[]).decision, Decision::Shared);
        assert_eq!(
            choose(&[cand(&a, 0), cand(&b, 64)]),
            Route::shared(Decision::Fallback)
        );
        // Room counts what this gateway already sent, and work waiting inside the engine.
        let mut reserved = cand(&a, 16);
        reserved.reserved = 4;
        assert_eq!(choose(&[reserved]).decision, Decision::Fallback);
        let mut waiting = worker("w", 1, 0.2);
        waiting.waiting = 2;
        assert_eq!(choose(&[cand(&waiting, 16)]).decision, Decision::Fallback);
        // A shorter hit with room beats a longer one without.
        assert_eq!(
            choose(&[cand(&a, 16), cand(&b, 64)]).worker.as_deref(),
            Some("a")
        );
    }

    #[test]
    fn the_routing_flag_values() {
        assert_eq!("cache-aware".parse(), Ok(Routing::CacheAware));
        assert_eq!("shared".parse(), Ok(Routing::Shared));
        assert!("random".parse::<Routing>().is_err());
        assert_eq!(Routing::default(), Routing::CacheAware);
    }

    #[test]
    fn a_reservation_counts_until_dropped() {
        let router = Router::new(Routing::CacheAware, 16);
        let r1 = router.reserve("a");
        let r2 = router.reserve("a");
        assert_eq!(router.lock_reserved().get("a"), Some(&2));
        drop(r1);
        drop(r2);
        assert!(router.lock_reserved().is_empty());
    }
}
