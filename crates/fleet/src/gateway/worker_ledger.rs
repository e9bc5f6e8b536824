//! What this gateway has sent each worker and not seen progress on yet, as the router counts
//! it between two heartbeats:
//!
//! * reserved requests: routed to a worker's own stream and not started there (its heartbeat
//!   does not count them yet). Held by a [`Reservation`], released at the worker's `Started`;
//! * pending prefill tokens: prompt tokens of requests a worker has been sent or has taken
//!   whose first token has not come back — the prefill queued ahead of a new request there.
//!   Held by a [`PrefillHold`], released at the request's first event.
//!
//! Each hold releases its share when dropped, so a request that ends any way (finished,
//! failed, cancelled, its client gone) leaves nothing behind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// One worker's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerLoad {
    /// Requests routed to it and not started.
    pub reserved: usize,
    /// Prompt tokens it has to prefill before a new request's first token.
    pub pending_prefill_tokens: usize,
}

impl WorkerLoad {
    fn is_idle(&self) -> bool {
        *self == WorkerLoad::default()
    }
}

/// The counts of every worker with any, shared by the router and the holds it hands out.
#[derive(Clone, Default)]
pub struct WorkerLedger {
    loads: Arc<Mutex<HashMap<String, WorkerLoad>>>,
}

impl WorkerLedger {
    /// A copy of the counts (workers with none are absent).
    pub fn snapshot(&self) -> HashMap<String, WorkerLoad> {
        self.lock().clone()
    }

    /// Counts one more request routed to `worker` until the hold is dropped.
    pub fn reserve(&self, worker: &str) -> Reservation {
        self.update(worker, |l| l.reserved += 1);
        Reservation(Hold {
            ledger: self.clone(),
            worker: worker.to_string(),
        })
    }

    /// Counts `tokens` of prefill on `worker` until the hold is dropped.
    pub fn hold_prefill(&self, worker: &str, tokens: usize) -> PrefillHold {
        self.update(worker, |l| l.pending_prefill_tokens += tokens);
        PrefillHold {
            hold: Hold {
                ledger: self.clone(),
                worker: worker.to_string(),
            },
            tokens,
        }
    }

    fn update(&self, worker: &str, f: impl FnOnce(&mut WorkerLoad)) {
        let mut loads = self.lock();
        let load = loads.entry(worker.to_string()).or_default();
        f(load);
        if load.is_idle() {
            loads.remove(worker);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, WorkerLoad>> {
        // A map of counts: a panic elsewhere cannot leave it half-updated.
        self.loads.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A worker and the ledger it is counted in.
struct Hold {
    ledger: WorkerLedger,
    worker: String,
}

/// A request routed to a worker and not started there yet; dropping it releases the count.
pub struct Reservation(Hold);

impl Drop for Reservation {
    fn drop(&mut self) {
        self.0.ledger.update(&self.0.worker, |l| {
            l.reserved = l.reserved.saturating_sub(1)
        });
    }
}

/// A request's prompt tokens queued for prefill on a worker; dropping it releases them.
pub struct PrefillHold {
    hold: Hold,
    tokens: usize,
}

impl PrefillHold {
    /// The worker it counts on.
    pub fn worker(&self) -> &str {
        &self.hold.worker
    }
}

impl Drop for PrefillHold {
    fn drop(&mut self) {
        let tokens = self.tokens;
        self.hold.ledger.update(&self.hold.worker, |l| {
            l.pending_prefill_tokens = l.pending_prefill_tokens.saturating_sub(tokens)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_count_until_dropped() {
        let ledger = WorkerLedger::default();
        let r1 = ledger.reserve("a");
        let r2 = ledger.reserve("a");
        let p1 = ledger.hold_prefill("a", 300);
        let p2 = ledger.hold_prefill("b", 40);
        assert_eq!(p1.worker(), "a");
        let loads = ledger.snapshot();
        assert_eq!(
            loads["a"],
            WorkerLoad {
                reserved: 2,
                pending_prefill_tokens: 300
            }
        );
        assert_eq!(loads["b"].pending_prefill_tokens, 40);
        drop(r1);
        drop(p1);
        assert_eq!(
            ledger.snapshot()["a"],
            WorkerLoad {
                reserved: 1,
                pending_prefill_tokens: 0
            }
        );
        drop((r2, p2));
        assert!(ledger.snapshot().is_empty(), "idle workers are forgotten");
    }
}
