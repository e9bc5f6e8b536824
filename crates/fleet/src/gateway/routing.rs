//! Routing: which stream a request is queued on.
//!
//! * [`Routing::Shared`]: the model's shared band stream, which any worker reads (the first
//!   free worker takes it).
//! * [`Routing::CacheAware`] (the default): the prompt's block hashes are computed as the
//!   workers' engines compute them ([`EngineRequest::prompt_block_hashes`], with the block
//!   size each worker announces), looked up in the [`PrefixIndex`], and each live worker of
//!   the model is scored by [`choose`]: the prefill a request would wait for there — the
//!   prompt tokens this gateway sent it whose first token has not come back
//!   ([`WorkerLedger`]), plus the request's own prompt tokens that worker does not hold.
//!   The cheapest worker with room gets the request on its own stream; a prompt no worker
//!   holds any of goes to the shared stream.
//!
//! Each decision is counted in `kestrel:gateway_routed_requests_total{decision}`:
//! `cache_hit` (to the own stream of a worker holding part of the prompt), `balanced` (to an
//! idler worker's own stream: the prefix's holders have more prefill queued than the prefix
//! saves), `shared` (no worker holds any of the prefix, or shared routing), `fallback` (no
//! worker has room), `adapter` (a request only some workers can run, for its LoRA adapter, that
//! no cache hit placed: to the least busy of them; [`Router::route_pinned`]).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Mutex;

use kestrel_engine::api::EngineRequest;

use super::prefix_index::PrefixIndex;
use super::worker_ledger::{PrefillHold, Reservation, WorkerLedger, WorkerLoad};
use crate::metrics::{MATCHED_PREFIX_TOKENS_TOTAL, ROUTED_REQUESTS_TOTAL};
use crate::protocol::WorkerStatus;

/// How the gateway picks a request's stream (`--routing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Routing {
    /// To the worker where the request's first token comes soonest: its cached prefix
    /// against the prefill already queued there.
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
    Balanced,
    Shared,
    Fallback,
    Adapter,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::CacheHit => "cache_hit",
            Decision::Balanced => "balanced",
            Decision::Shared => "shared",
            Decision::Fallback => "fallback",
            Decision::Adapter => "adapter",
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
    pub(crate) fn shared(decision: Decision) -> Route {
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
    /// Prompt tokens it would have to compute for this request.
    pub uncached_tokens: usize,
    /// What this gateway sent it that has not progressed yet.
    pub load: WorkerLoad,
}

impl Candidate<'_> {
    /// Prefill tokens ahead of this request's first token there, its own included.
    fn cost(&self) -> usize {
        self.load.pending_prefill_tokens + self.uncached_tokens
    }

    /// Sequences it runs or has been sent, over those it can run at once.
    fn busy(&self) -> f64 {
        let busy = self.status.active + self.load.reserved;
        busy as f64 / self.status.max_num_seqs.max(1) as f64
    }

    /// 0 with its model in memory, 1 loading, 2 unloaded: a job there waits for the load.
    fn start_rank(&self) -> u8 {
        self.status.model_state().start_rank()
    }

    fn has_room(&self) -> bool {
        self.status.waiting == 0
            && self.status.active + self.load.reserved < self.status.max_num_seqs
    }
}

/// The scorer. A prompt no worker holds any of goes to the shared stream (the first free
/// worker takes it). Otherwise, among workers with room, those with the model in memory
/// first (a worker of several models that would have to load it, unloading another, comes
/// last), the one with the least prefill ahead of the request's first token wins (ties: the
/// longer cached prefix, then the less busy, then the lower KV usage); no worker with room:
/// the shared stream.
pub fn choose(candidates: &[Candidate<'_>]) -> Route {
    if candidates.iter().all(|c| c.matched_tokens == 0) {
        return Route::shared(Decision::Shared);
    }
    let best = candidates.iter().filter(|c| c.has_room()).min_by(|a, b| {
        a.start_rank()
            .cmp(&b.start_rank())
            .then(a.cost().cmp(&b.cost()))
            .then(b.matched_tokens.cmp(&a.matched_tokens))
            .then(a.busy().total_cmp(&b.busy()))
            .then(a.status.kv_usage.total_cmp(&b.status.kv_usage))
    });
    match best {
        Some(c) => Route {
            worker: Some(c.status.worker_id.clone()),
            decision: if c.matched_tokens > 0 {
                Decision::CacheHit
            } else {
                Decision::Balanced
            },
            matched_tokens: c.matched_tokens,
        },
        None => Route::shared(Decision::Fallback),
    }
}

/// The readiest of `workers` (model in memory, then loading, then unloaded), then the least
/// busy, then the one with the least prefill queued, then the lower KV usage: for a request
/// only they can run.
fn least_busy(
    workers: &[&WorkerStatus],
    loads: &HashMap<String, WorkerLoad>,
    prompt_tokens: usize,
) -> Route {
    let best = workers
        .iter()
        .map(|w| Candidate {
            status: w,
            matched_tokens: 0,
            uncached_tokens: prompt_tokens,
            load: loads.get(&w.worker_id).copied().unwrap_or_default(),
        })
        .min_by(|a, b| {
            a.start_rank()
                .cmp(&b.start_rank())
                .then(a.busy().total_cmp(&b.busy()))
                .then(a.cost().cmp(&b.cost()))
                .then(a.status.kv_usage.total_cmp(&b.status.kv_usage))
        });
    Route {
        worker: best.map(|c| c.status.worker_id.clone()),
        decision: Decision::Adapter,
        matched_tokens: 0,
    }
}

/// A routed request's holds on the ledger, and what each worker would have to prefill of it
/// (for a request any worker may take).
pub struct Routed {
    pub route: Route,
    reservation: Option<Reservation>,
    prefill: Option<PrefillHold>,
    uncached_by_worker: HashMap<String, usize>,
    prompt_tokens: usize,
    ledger: WorkerLedger,
}

impl Routed {
    /// `worker` started the request (its first attempt, or a re-run): no longer reserved,
    /// and its prefill now counts on that worker.
    pub fn started(&mut self, worker: &str) {
        self.reservation = None;
        if self.prefill.as_ref().is_some_and(|p| p.worker() == worker) {
            return;
        }
        let tokens = self
            .uncached_by_worker
            .get(worker)
            .copied()
            .unwrap_or(self.prompt_tokens);
        self.prefill = Some(self.ledger.hold_prefill(worker, tokens));
    }

    /// An event of the request came back: its prefill is done (or it ended).
    pub fn progressed(&mut self) {
        self.reservation = None;
        self.prefill = None;
    }
}

/// The gateway's router: the routing mode, the prefix index the KV feed fills, and what it
/// sent each worker that has not progressed yet.
pub struct Router {
    pub routing: Routing,
    pub index: Mutex<PrefixIndex>,
    ledger: WorkerLedger,
}

impl Router {
    pub fn new(routing: Routing, max_blocks: usize) -> Router {
        Router {
            routing,
            index: Mutex::new(PrefixIndex::new(max_blocks)),
            ledger: WorkerLedger::default(),
        }
    }

    /// Where `req` goes among `workers` (the live workers of its model); counted in the
    /// routing metrics. A request routed to a worker holds a [`Reservation`] on it until the
    /// worker starts it, and its prefill until its first event.
    pub fn route(&self, req: &EngineRequest, workers: &[&WorkerStatus]) -> Routed {
        self.route_with(req, workers, false)
    }

    /// [`Router::route`] for a request only `workers` can run (they serve its LoRA adapter):
    /// never to the shared stream, where any worker of the model could take it. Without a
    /// cache hit it goes to the least busy of them.
    pub fn route_pinned(&self, req: &EngineRequest, workers: &[&WorkerStatus]) -> Routed {
        self.route_with(req, workers, true)
    }

    /// Where a one-pass job (embedding, prompt scores) only `workers` can run goes: the
    /// readiest, least busy of them ([`least_busy`]). Holds nothing on the ledger: the job's
    /// one forward pass ends it.
    pub fn route_pass(&self, workers: &[&WorkerStatus], prompt_tokens: usize) -> Route {
        least_busy(workers, &self.ledger.snapshot(), prompt_tokens)
    }

    fn route_with(&self, req: &EngineRequest, workers: &[&WorkerStatus], pinned: bool) -> Routed {
        let prompt_tokens = req.prompt_ids().len();
        let loads = self.ledger.snapshot();
        let matched = match self.routing {
            Routing::Shared => HashMap::new(),
            Routing::CacheAware => self.matched_tokens(req, workers),
        };
        let candidates: Vec<Candidate> = workers
            .iter()
            .filter(|w| matched.contains_key(&w.worker_id))
            .map(|w| {
                let matched_tokens = matched[&w.worker_id];
                Candidate {
                    status: w,
                    matched_tokens,
                    uncached_tokens: prompt_tokens - matched_tokens,
                    load: loads.get(&w.worker_id).copied().unwrap_or_default(),
                }
            })
            .collect();
        let mut route = match self.routing {
            Routing::Shared => Route::shared(Decision::Shared),
            Routing::CacheAware => choose(&candidates),
        };
        if pinned && route.worker.is_none() {
            route = least_busy(workers, &loads, prompt_tokens);
        }
        metrics::counter!(ROUTED_REQUESTS_TOTAL, "decision" => route.decision.as_str())
            .increment(1);
        metrics::counter!(MATCHED_PREFIX_TOKENS_TOTAL).increment(route.matched_tokens as u64);
        let uncached_by_worker: HashMap<String, usize> = candidates
            .iter()
            .map(|c| (c.status.worker_id.clone(), c.uncached_tokens))
            .collect();
        let (reservation, prefill) = match &route.worker {
            Some(w) => (
                Some(self.ledger.reserve(w)),
                Some(self.ledger.hold_prefill(
                    w,
                    uncached_by_worker.get(w).copied().unwrap_or(prompt_tokens),
                )),
            ),
            None => (None, None),
        };
        Routed {
            route,
            reservation,
            prefill,
            uncached_by_worker,
            prompt_tokens,
            ledger: self.ledger.clone(),
        }
    }

    /// The prompt tokens each worker that announces a block size holds, by the index.
    fn matched_tokens(
        &self,
        req: &EngineRequest,
        workers: &[&WorkerStatus],
    ) -> HashMap<String, usize> {
        let mut hashes_by_size = HashMap::new();
        let index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        workers
            .iter()
            .filter_map(|w| {
                let block_size = w.prefix_block_size.filter(|&b| b > 0)?;
                let hashes = hashes_by_size
                    .entry(block_size)
                    .or_insert_with(|| cacheable(req, block_size));
                let blocks = index.matched_blocks(&w.worker_id, hashes);
                Some((w.worker_id.clone(), blocks * block_size))
            })
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::ModelIdentity;
    use kestrel_server::model_slot::ModelState;

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
            adapters: Vec::new(),
            state: None,
        }
    }

    /// A 64-token prompt of which `status`'s cache holds `matched_tokens`.
    fn cand(status: &WorkerStatus, matched_tokens: usize) -> Candidate<'_> {
        Candidate {
            status,
            matched_tokens,
            uncached_tokens: 64 - matched_tokens,
            load: WorkerLoad::default(),
        }
    }

    fn pending(mut c: Candidate<'_>, tokens: usize) -> Candidate<'_> {
        c.load.pending_prefill_tokens = tokens;
        c
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
    fn queued_prefill_outweighs_a_prefix_only_when_it_costs_more_than_it_saves() {
        let (a, b) = (worker("a", 1, 0.1), worker("b", 1, 0.1));
        // a holds 48 of 64 tokens (16 to compute) behind 40 queued: 56 < 64 at idle b.
        let route = choose(&[pending(cand(&a, 48), 40), cand(&b, 0)]);
        assert_eq!(route.worker.as_deref(), Some("a"));
        assert_eq!(route.decision, Decision::CacheHit);
        // Behind 100 queued tokens the prefix no longer pays: b recomputes all 64 sooner.
        let route = choose(&[pending(cand(&a, 48), 100), cand(&b, 0)]);
        assert_eq!(route.worker.as_deref(), Some("b"));
        assert_eq!(
            (route.decision, route.matched_tokens),
            (Decision::Balanced, 0)
        );
        // Between two holders, the shorter prefix on the idler worker.
        let route = choose(&[pending(cand(&a, 48), 100), pending(cand(&b, 32), 10)]);
        assert_eq!(route.worker.as_deref(), Some("b"));
        assert_eq!(route.decision, Decision::CacheHit);
        // Equal cost: the longer prefix.
        let route = choose(&[pending(cand(&a, 48), 16), cand(&b, 32)]);
        assert_eq!(route.worker.as_deref(), Some("a"));
    }

    #[test]
    fn no_hit_is_shared_and_no_room_falls_back() {
        let (a, b) = (worker("a", 0, 0.0), worker("b", 4, 0.5));
        assert_eq!(
            choose(&[cand(&a, 0), cand(&b, 0)]),
            Route::shared(Decision::Shared)
        );
        // However busy the others: nobody holds a prefix, the first free worker takes it.
        assert_eq!(
            choose(&[pending(cand(&a, 0), 5000), cand(&b, 0)]),
            Route::shared(Decision::Shared)
        );
        assert_eq!(choose(&[]).decision, Decision::Shared);
        // Room counts what this gateway already sent, and work waiting inside the engine.
        assert_eq!(choose(&[cand(&b, 64)]), Route::shared(Decision::Fallback));
        let mut reserved = cand(&a, 16);
        reserved.load.reserved = 4;
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
    fn workers_with_the_model_in_memory_come_first() {
        let state = |id: &str, active: usize, s: Option<&str>| WorkerStatus {
            state: s.map(str::to_string),
            ..worker(id, active, 0.1)
        };
        let (loaded, loading, unloaded) = (
            state("loaded", 3, Some("loaded")),
            state("loading", 1, Some("loading")),
            state("unloaded", 0, Some("unloaded")),
        );
        // A hit on an idle worker that would have to load the model loses to a busier
        // worker holding it in memory, even with more prefill queued there.
        let route = choose(&[
            pending(cand(&loaded, 16), 200),
            cand(&loading, 16),
            cand(&unloaded, 48),
        ]);
        assert_eq!(route.worker.as_deref(), Some("loaded"));
        assert_eq!(
            choose(&[cand(&loading, 16), cand(&unloaded, 48)])
                .worker
                .as_deref(),
            Some("loading")
        );
        // An older worker announces no state: always loaded. An unknown state: unloaded.
        assert_eq!(worker("old", 0, 0.0).model_state(), ModelState::Loaded);
        assert_eq!(
            state("x", 0, Some("warming")).model_state(),
            ModelState::Unloaded
        );
        // A pinned request and a one-pass job without a hit: the readiest, then least busy.
        let router = Router::new(Routing::CacheAware, 1024);
        let workers = [&unloaded, &loading, &loaded];
        assert_eq!(
            router.route_pass(&workers, 40).worker.as_deref(),
            Some("loaded")
        );
        assert_eq!(
            router
                .route_pass(&[&unloaded, &loading], 40)
                .worker
                .as_deref(),
            Some("loading")
        );
        let idle_loaded = state("idle", 0, Some("loaded"));
        assert_eq!(
            router
                .route_pass(&[&loaded, &idle_loaded, &unloaded], 40)
                .worker
                .as_deref(),
            Some("idle")
        );
    }

    #[test]
    fn a_pinned_request_goes_to_one_of_its_workers_even_without_a_hit() {
        let limits = kestrel_engine::api::RequestLimits {
            vocab_size: 100,
            max_model_len: 256,
        };
        let sampling = kestrel_engine::sampling::SamplingParams {
            max_tokens: 2,
            ..Default::default()
        };
        let req = EngineRequest::new((0..40).collect(), sampling, &limits).unwrap();
        let (busy, idle) = (worker("busy", 3, 0.1), worker("idle", 1, 0.9));
        let router = Router::new(Routing::CacheAware, 1024);
        let free = router.route(&req, &[&busy, &idle]);
        assert_eq!(free.route.worker, None, "no hit: the shared stream");
        let pinned = router.route_pinned(&req, &[&busy, &idle]);
        assert_eq!(pinned.route.worker.as_deref(), Some("idle"));
        assert_eq!(pinned.route.decision, Decision::Adapter);
        let shared_mode = Router::new(Routing::Shared, 1024);
        let pinned = shared_mode.route_pinned(&req, &[&busy]);
        assert_eq!(pinned.route.worker.as_deref(), Some("busy"));
    }

    #[test]
    fn the_routing_flag_values() {
        assert_eq!("cache-aware".parse(), Ok(Routing::CacheAware));
        assert_eq!("shared".parse(), Ok(Routing::Shared));
        assert!("random".parse::<Routing>().is_err());
        assert_eq!(Routing::default(), Routing::CacheAware);
    }

    #[test]
    fn a_routed_request_holds_its_prefill_until_its_first_event() {
        let router = Router::new(Routing::CacheAware, 16);
        let ledger = router.ledger.clone();
        let mut routed = Routed {
            route: Route::shared(Decision::Shared),
            reservation: None,
            prefill: None,
            uncached_by_worker: HashMap::from([("a".to_string(), 10), ("b".to_string(), 70)]),
            prompt_tokens: 80,
            ledger: ledger.clone(),
        };
        routed.started("b");
        assert_eq!(ledger.snapshot()["b"].pending_prefill_tokens, 70);
        // Re-run elsewhere (b died): the prefill moves; a worker unknown at routing time
        // counts the whole prompt.
        routed.started("c");
        assert!(!ledger.snapshot().contains_key("b"));
        assert_eq!(ledger.snapshot()["c"].pending_prefill_tokens, 80);
        routed.progressed();
        assert!(ledger.snapshot().is_empty());
    }
}
