//! [`SchedulingPolicy`]: the scheduler's decisions about *who* — the waiting queue's order,
//! the victim of a preemption and the deferral of an admission — behind one small trait, as in
//! vLLM's v1 scheduler; [`PriorityFcfs`] is the implementation the engine uses.
//!
//! The scheduler keeps the mechanics (budgets, KV allocation, chunking) and asks the policy:
//!
//! ```text
//! add_request / preempt -> queue_class(req)        waiting order: (class, FIFO position)
//! allocation fails      -> pick_victim(running, ?) which running request loses its blocks
//! schedule_waiting      -> defer_admission(req, a) skip this request for now (LoRA slots)
//! ```

use std::collections::HashSet;
use std::fmt;

use crate::adapter_id::AdapterId;
use crate::request::{Request, RequestId};

/// What admission has decided so far in one step, for [`SchedulingPolicy::defer_admission`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmissionState {
    /// The adapters of the running requests and of those admitted so far this step.
    pub active_adapters: HashSet<AdapterId>,
    /// Most distinct adapters that may run at once.
    pub max_loras: usize,
    /// Whether a request with an adapter was deferred earlier in this step.
    pub adapter_deferred: bool,
}

impl AdmissionState {
    /// Admission over the running requests' `active_adapters`, at most `max_loras` of them.
    pub fn new(active_adapters: HashSet<AdapterId>, max_loras: usize) -> Self {
        AdmissionState {
            active_adapters,
            max_loras,
            adapter_deferred: false,
        }
    }

    /// `req` was admitted: its adapter is now active.
    pub fn admitted(&mut self, req: &Request) {
        self.active_adapters.extend(req.params().adapter);
    }

    /// `req` was deferred.
    pub fn deferred(&mut self, req: &Request) {
        self.adapter_deferred |= req.params().adapter.is_some();
    }
}

/// Ordering, victim choice and admission deferral for the [`super::Scheduler`].
pub trait SchedulingPolicy: fmt::Debug + Send {
    /// The class `req` waits in: the waiting queue admits lower classes first, FIFO within a
    /// class, and a preempted request goes back to the front of its class.
    fn queue_class(&self, req: &Request) -> i32;

    /// The running request to preempt, among `running` (in admission order): for KV space when
    /// `admitting` is `None`, else to make room for the waiting request `admitting`. `None`:
    /// no request may be preempted.
    fn pick_victim(&self, running: &[&Request], admitting: Option<&Request>) -> Option<RequestId>;

    /// Whether admitting `req` waits for a later step, given what this step admitted so far.
    fn defer_admission(&self, req: &Request, admission: &AdmissionState) -> bool;
}

/// First come, first served within priority classes (lower value first, vLLM's convention).
///
/// * Order: by priority, then arrival.
/// * Victim: the lowest priority (largest value), then the latest arrival; to admit a waiting
///   request only strictly less urgent ones. A request preempted `max_preemptions` times is
///   protected: never a victim for a waiting request, and a victim for KV space only when
///   nothing unprotected runs.
/// * Deferral: a request whose adapter is not active while `max_loras` adapters are, and every
///   adapter request behind a deferred one (so it is not starved); base-model requests never.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PriorityFcfs {
    max_preemptions: Option<u32>,
}

impl PriorityFcfs {
    /// The policy protecting requests preempted `max_preemptions` times (`None`: never).
    pub fn new(max_preemptions: Option<u32>) -> Self {
        PriorityFcfs { max_preemptions }
    }

    /// Whether `req` was preempted often enough to be spared.
    fn protected(&self, req: &Request) -> bool {
        self.max_preemptions
            .is_some_and(|max| req.num_preemptions() >= max)
    }
}

impl SchedulingPolicy for PriorityFcfs {
    fn queue_class(&self, req: &Request) -> i32 {
        req.priority()
    }

    fn pick_victim(&self, running: &[&Request], admitting: Option<&Request>) -> Option<RequestId> {
        let below = admitting.map(Request::priority);
        let candidates = || {
            running
                .iter()
                .copied()
                .filter(move |r| below.is_none_or(|p| r.priority() > p))
        };
        let key = |r: &&Request| (r.priority(), r.arrival_seq());
        let unprotected = candidates().filter(|r| !self.protected(r)).max_by_key(key);
        match (unprotected, below) {
            (Some(r), _) => Some(r.id()),
            (None, Some(_)) => None,
            (None, None) => candidates().max_by_key(key).map(Request::id),
        }
    }

    fn defer_admission(&self, req: &Request, admission: &AdmissionState) -> bool {
        let Some(adapter) = req.params().adapter else {
            return false;
        };
        admission.adapter_deferred
            || (!admission.active_adapters.contains(&adapter)
                && admission.active_adapters.len() >= admission.max_loras)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::RequestParams;

    /// Request `id` of `priority`, arrived `arrival`-th, preempted `preemptions` times.
    fn req(id: RequestId, priority: i32, arrival: u64, preemptions: u32) -> Request {
        let mut params = RequestParams::new(4);
        params.priority = priority;
        let mut r = Request::new(id, vec![1, 2, 3], params);
        r.set_arrival_seq(arrival);
        for _ in 0..preemptions {
            r.mark_preempted();
        }
        r
    }

    fn with_adapter(id: RequestId, adapter: Option<u32>) -> Request {
        let mut params = RequestParams::new(4);
        params.adapter = adapter.map(AdapterId);
        Request::new(id, vec![1], params)
    }

    #[test]
    fn requests_queue_by_priority() {
        let p = PriorityFcfs::new(None);
        assert_eq!(p.queue_class(&req(1, -3, 0, 0)), -3);
        assert!(p.queue_class(&req(1, -3, 5, 0)) < p.queue_class(&req(2, 0, 1, 0)));
    }

    #[test]
    fn the_victim_is_the_lowest_priority_then_the_latest_arrival() {
        let p = PriorityFcfs::new(None);
        let (a, b, c, d) = (
            req(1, 0, 0, 0),
            req(2, 5, 1, 0),
            req(3, 5, 2, 0),
            req(4, 0, 3, 0),
        );
        assert_eq!(p.pick_victim(&[&a, &b, &c, &d], None), Some(3));
        assert_eq!(p.pick_victim(&[&a, &d], None), Some(4));
        assert_eq!(p.pick_victim(&[], None), None);
    }

    #[test]
    fn a_waiting_request_preempts_only_strictly_less_urgent_ones() {
        let p = PriorityFcfs::new(None);
        let (a, b) = (req(1, 0, 0, 0), req(2, 2, 1, 0));
        let (urgent, equal) = (req(9, 1, 5, 0), req(9, 2, 5, 0));
        assert_eq!(p.pick_victim(&[&a, &b], Some(&urgent)), Some(2));
        assert_eq!(p.pick_victim(&[&a, &b], Some(&equal)), None);
    }

    #[test]
    fn protected_requests_are_victims_only_for_kv_space_when_nothing_else_runs() {
        let p = PriorityFcfs::new(Some(2));
        let (worn, fresh) = (req(1, 5, 3, 2), req(2, 0, 0, 0));
        assert_eq!(p.pick_victim(&[&worn, &fresh], None), Some(2));
        assert_eq!(p.pick_victim(&[&worn], None), Some(1));
        assert_eq!(p.pick_victim(&[&worn], Some(&req(9, 0, 9, 0))), None);
        let unlimited = PriorityFcfs::new(None);
        assert_eq!(unlimited.pick_victim(&[&worn, &fresh], None), Some(1));
    }

    #[test]
    fn adapter_requests_wait_for_a_lora_slot_and_behind_a_deferred_one() {
        let p = PriorityFcfs::new(None);
        let mut admission = AdmissionState::new(HashSet::from([AdapterId(1)]), 1);
        assert!(!p.defer_admission(&with_adapter(1, None), &admission));
        assert!(!p.defer_admission(&with_adapter(2, Some(1)), &admission));
        let other = with_adapter(3, Some(2));
        assert!(p.defer_admission(&other, &admission));
        admission.deferred(&other);
        assert!(
            p.defer_admission(&with_adapter(4, Some(1)), &admission),
            "an active adapter waits behind the deferred request"
        );
        assert!(!p.defer_admission(&with_adapter(5, None), &admission));
        let mut roomy = AdmissionState::new(HashSet::new(), 2);
        let first = with_adapter(6, Some(7));
        assert!(!p.defer_admission(&first, &roomy));
        roomy.admitted(&first);
        assert!(!p.defer_admission(&with_adapter(7, Some(8)), &roomy));
        roomy.admitted(&with_adapter(7, Some(8)));
        assert!(p.defer_admission(&with_adapter(8, Some(9)), &roomy));
    }
}
