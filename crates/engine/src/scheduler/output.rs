//! Value types a scheduling step produces: [`SchedulerOutput`] (what runs now, handed to the
//! executor as a [`BatchInput`]) and [`RequestOutput`] (what [`super::Scheduler::update`] reports
//! back per request).

use crate::executor::{BatchInput, SeqBatch};
use crate::kv::BlockId;
use crate::request::{FinishReason, RequestId};

/// One request's share of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledSeq {
    /// The request.
    pub request_id: RequestId,
    /// Tokens to compute now, at positions `start_pos..start_pos + tokens.len()`.
    pub tokens: Vec<u32>,
    /// The request's computed tokens before this step.
    pub start_pos: usize,
    /// Its block table, covering `start_pos + tokens.len()` positions.
    pub block_table: Vec<BlockId>,
    /// Whether this step completes the sequence, so a token is sampled from its logits.
    pub need_logits: bool,
}

/// Everything one step runs, in batch order (running requests first, then new admissions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerOutput {
    /// Scheduled sequences.
    pub seqs: Vec<ScheduledSeq>,
    /// Requests preempted while building this step (their blocks were freed).
    pub preempted: Vec<RequestId>,
}

impl SchedulerOutput {
    /// Whether nothing was scheduled.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Tokens computed by the step.
    pub fn num_batched_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.tokens.len()).sum()
    }

    /// Ids of the sequences that sample a token this step, in batch order (the order of the
    /// executor's logits rows and of the tokens [`super::Scheduler::update`] expects).
    pub fn sampling_request_ids(&self) -> Vec<RequestId> {
        self.seqs
            .iter()
            .filter(|s| s.need_logits)
            .map(|s| s.request_id)
            .collect()
    }

    /// The executor's view of the step.
    pub fn to_batch_input(&self) -> BatchInput {
        let seqs = self
            .seqs
            .iter()
            .map(|s| SeqBatch {
                tokens: s.tokens.clone(),
                start_pos: s.start_pos,
                block_table: s.block_table.clone(),
                need_logits: s.need_logits,
            })
            .collect();
        BatchInput { seqs }
    }
}

/// What a step produced for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOutput {
    /// The request.
    pub request_id: RequestId,
    /// Tokens generated this step.
    pub new_token_ids: Vec<u32>,
    /// Set when the request finished this step.
    pub finish_reason: Option<FinishReason>,
}
