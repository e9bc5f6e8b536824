//! Value types a scheduling step produces: [`SchedulerOutput`] (what runs now, handed to the
//! executor as a [`BatchInput`]) and [`RequestOutput`] (what [`super::Scheduler::update`] reports
//! back per request).

use crate::executor::BatchInput;
use crate::request::{FinishReason, RequestId};

/// Everything one step runs, in batch order (running requests first, then new admissions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerOutput {
    /// Scheduled sequences: what the executor runs.
    pub batch: BatchInput,
    /// Requests preempted while building this step (their blocks were freed).
    pub preempted: Vec<RequestId>,
}

impl SchedulerOutput {
    /// Whether nothing was scheduled.
    pub fn is_empty(&self) -> bool {
        self.batch.seqs.is_empty()
    }

    /// Tokens computed by the step.
    pub fn num_batched_tokens(&self) -> usize {
        self.batch.num_tokens()
    }

    /// Ids of the sequences that sample a token this step, in batch order (the order of the
    /// executor's logits rows and of the tokens [`super::Scheduler::update`] expects).
    pub fn sampling_request_ids(&self) -> Vec<RequestId> {
        self.batch
            .seqs
            .iter()
            .filter(|s| s.need_logits)
            .map(|s| s.request_id)
            .collect()
    }
}

/// What a step produced for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOutput {
    /// The request.
    pub request_id: RequestId,
    /// The token generated this step.
    pub token: u32,
    /// Set when the token-level stop rule ([`crate::request::Request::check_stop`]) says the
    /// request is done; the engine ends it (the scheduler does not).
    pub stop: Option<FinishReason>,
}
