//! Value types a scheduling step produces: [`SchedulerOutput`] (what runs now, handed to the
//! executor as a [`BatchInput`]) and [`RequestOutput`] (what [`super::Scheduler::update`] reports
//! back per request).

use crate::executor::{BatchInput, SeqBatch};
use crate::request::{FinishReason, RequestId};

/// Everything one step runs, in batch order (running requests first, then new admissions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerOutput {
    /// Scheduled sequences: what the executor runs.
    pub batch: BatchInput,
    /// Requests preempted while building this step (their blocks were freed).
    pub preempted: Vec<RequestId>,
    /// Draft-token slots allocated past each sequence's last token, by batch index (empty when
    /// no sequence speculates this step). The batch holds only real tokens: the engine appends
    /// the draft tokens it proposes (at most this many) before executing the step.
    pub lookahead: Vec<usize>,
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
        self.sampling_seqs().map(|s| s.request_id).collect()
    }

    /// The sequences with logits rows, in batch order.
    pub fn sampling_seqs(&self) -> impl Iterator<Item = &SeqBatch> {
        self.batch.seqs.iter().filter(|s| s.num_logits > 0)
    }

    /// Draft-token slots of the `i`-th sequence of the batch.
    pub fn lookahead(&self, i: usize) -> usize {
        self.lookahead.get(i).copied().unwrap_or(0)
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
