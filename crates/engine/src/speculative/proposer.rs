//! [`Proposer`]: what guesses draft tokens for speculative decoding.

use crate::executor::ExecutorError;
use crate::kv::BlockId;
use crate::request::RequestId;

use super::spec_state::SpecState;

/// One sequence that proposes draft tokens this step.
#[derive(Debug)]
pub struct DraftSeq<'a> {
    /// The request.
    pub request_id: RequestId,
    /// Prompt and generated tokens; the last one is the token the step computes.
    pub tokens: &'a [u32],
    /// The request's block table, covering `tokens.len() + k - 1` positions (the positions a
    /// draft model writes while it proposes `k` tokens).
    pub block_table: &'a [BlockId],
    /// Most draft tokens to propose.
    pub k: usize,
    /// The request's speculation state (what a proposer remembers about it between steps).
    pub state: &'a mut SpecState,
}

impl DraftSeq<'_> {
    /// The draft [`Proposer::lookahead`] stashed in the request's state, cut to `k` tokens
    /// (for proposers that find their drafts while looking ahead).
    pub fn take_stashed_draft(&mut self) -> Vec<u32> {
        let mut draft = self.state.take_draft();
        draft.truncate(self.k);
        draft
    }
}

/// Guesses the tokens that follow a request's context. A proposer keeps no per-request state
/// of its own: what it remembers about a request lives in that request's [`SpecState`].
pub trait Proposer: Send {
    /// How many draft-token slots to schedule for the request with speculation state `state`
    /// and context `tokens` (at most `k`; 0: it decodes normally this step). Called before
    /// scheduling.
    fn lookahead(&mut self, state: &mut SpecState, tokens: &[u32], k: usize) -> usize;

    /// Draft tokens for each of `seqs` (at most `seq.k` each, fewer or none allowed), into
    /// `drafts` (cleared first, one entry per sequence).
    fn propose(
        &mut self,
        seqs: &mut [DraftSeq<'_>],
        drafts: &mut Vec<Vec<u32>>,
    ) -> Result<(), ExecutorError>;
}
