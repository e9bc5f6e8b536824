//! [`SpecState`]: one request's speculative-decoding state. It is a field of the request's
//! [`crate::request::Request`], so it is created and dropped with the request: no proposer or
//! controller keeps a map keyed by request id that would need cleaning up.

use crate::kv::BlockId;

/// What the draft model's KV cache holds for one request: the tokens it computed and the block
/// table it wrote them under.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DraftCache {
    pub(crate) tokens: Vec<u32>,
    pub(crate) table: Vec<BlockId>,
}

/// Per-request speculation state: the draft slots of the next step, the adaptive draft length,
/// the draft a proposer found before scheduling, and the draft model's cache bookkeeping.
#[derive(Debug, Clone, Default)]
pub struct SpecState {
    /// Draft-token slots the scheduler adds after the last token next step.
    lookahead: usize,
    /// The adaptive draft length ([`super::DraftLengths`]); `None`: the full `k`.
    draft_length: Option<usize>,
    /// The draft found while planning, handed to the step's proposal.
    found: Vec<u32>,
    /// What the draft model has computed for this request.
    draft_cache: DraftCache,
}

impl SpecState {
    /// Draft-token slots of the next step (0: an ordinary decode step).
    pub fn lookahead(&self) -> usize {
        self.lookahead
    }

    pub(crate) fn set_lookahead(&mut self, k: usize) {
        self.lookahead = k;
    }

    /// The current adaptive draft length, if acceptance has set one.
    pub fn draft_length(&self) -> Option<usize> {
        self.draft_length
    }

    pub(crate) fn set_draft_length(&mut self, len: usize) {
        self.draft_length = Some(len);
    }

    /// Keeps `draft` (found while planning) for this step's proposal, replacing any earlier one.
    pub fn stash_draft(&mut self, draft: &[u32]) {
        self.found.clear();
        self.found.extend_from_slice(draft);
    }

    /// Hands out the stashed draft once, leaving none.
    pub fn take_draft(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.found)
    }

    pub(crate) fn draft_cache(&self) -> &DraftCache {
        &self.draft_cache
    }

    pub(crate) fn draft_cache_mut(&mut self) -> &mut DraftCache {
        &mut self.draft_cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stashed_draft_is_handed_out_once() {
        let mut s = SpecState::default();
        s.stash_draft(&[1, 2]);
        s.stash_draft(&[3]);
        assert_eq!(s.take_draft(), vec![3]);
        assert!(s.take_draft().is_empty());
    }
}
