//! The load phase: releases requests on schedule, bounds how many are in flight, collects
//! outcomes in prompt order.
//!
//! Each request is a task spawned at its arrival time (all at time 0 in fixed-concurrency mode).
//! When a bound applies (`--concurrency N`, or `--max-concurrency` with a rate) the task first
//! waits for a permit of a FIFO semaphore, so requests start in order; the request's clock starts
//! only when it is actually sent, as in vLLM's `bench serve`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tokio::sync::Semaphore;

use crate::client::{send_one, Target};
use crate::outcome::{RequestFailure, RequestOutcome};
use crate::plan::{LoadMode, Plan};
use crate::prompts::PromptSpec;
use crate::schedule::poisson_arrivals;

/// Everything the load phase measured.
#[derive(Debug)]
pub(crate) struct LoadResult {
    /// One outcome per prompt, in prompt order.
    pub outcomes: Vec<RequestOutcome>,
    /// From the first release to the end of the last request.
    pub duration: Duration,
    /// Most requests that were in flight at the same time.
    pub peak_in_flight: usize,
}

/// Counts requests in flight and remembers the peak.
#[derive(Debug, Default)]
struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
    failed: AtomicUsize,
}

/// Decrements the in-flight count when the request ends, however it ends.
struct InFlightGuard<'a>(&'a InFlight);

impl InFlight {
    fn enter(&self) -> InFlightGuard<'_> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        InFlightGuard(self)
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Shared state of the request tasks.
struct Shared {
    target: Target,
    limit: Option<Semaphore>,
    in_flight: InFlight,
    progress: ProgressBar,
}

/// Runs every prompt of the plan against the target.
pub(crate) async fn run_load(plan: &Plan, target: Target, progress: ProgressBar) -> LoadResult {
    let n = plan.prompts.len();
    let (arrivals, limit) = match plan.load {
        LoadMode::Concurrency { concurrency } => (vec![Duration::ZERO; n], Some(concurrency)),
        LoadMode::Poisson {
            request_rate,
            max_concurrency,
        } => (
            poisson_arrivals(n, request_rate, plan.seed),
            max_concurrency,
        ),
    };
    let shared = Arc::new(Shared {
        target,
        limit: limit.map(Semaphore::new),
        in_flight: InFlight::default(),
        progress,
    });
    let start = Instant::now();
    let mut handles = Vec::with_capacity(n);
    for (prompt, offset) in plan.prompts.iter().zip(arrivals) {
        tokio::time::sleep_until((start + offset).into()).await;
        handles.push(tokio::spawn(one_request(
            Arc::clone(&shared),
            prompt.clone(),
            start,
        )));
    }
    let mut outcomes = Vec::with_capacity(n);
    for handle in handles {
        let joined = handle.await;
        outcomes.push(joined.unwrap_or_else(|e| Err(RequestFailure::Internal(e.to_string()))));
    }
    let duration = start.elapsed();
    shared.progress.finish();
    LoadResult {
        outcomes,
        duration,
        peak_in_flight: shared.in_flight.peak.load(Ordering::SeqCst),
    }
}

async fn one_request(
    shared: Arc<Shared>,
    prompt: PromptSpec,
    run_start: Instant,
) -> RequestOutcome {
    let _permit = match &shared.limit {
        // The semaphore is never closed, so acquire only fails if that invariant breaks.
        Some(sem) => Some(
            sem.acquire()
                .await
                .map_err(|e| RequestFailure::Internal(e.to_string()))?,
        ),
        None => None,
    };
    let outcome = {
        let _guard = shared.in_flight.enter();
        let sent_at = run_start.elapsed();
        send_one(&shared.target, &prompt).await.map(|mut m| {
            m.sent_at = sent_at;
            m
        })
    };
    if outcome.is_err() {
        let failed = shared.in_flight.failed.fetch_add(1, Ordering::SeqCst) + 1;
        shared.progress.set_message(format!("failed: {failed}"));
    }
    shared.progress.inc(1);
    outcome
}
