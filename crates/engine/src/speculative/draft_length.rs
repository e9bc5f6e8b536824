//! [`DraftLengths`]: each request's draft length, following how many of its drafts the model
//! accepts.
//!
//! Verifying `j` draft tokens computes `j + 1` positions, and on a CPU those are not free: a
//! 5-position pass of a small model costs about twice a 1-position step. Drafts the model
//! rejects are paid for all the same. So a request whose drafts keep being accepted (a copy in
//! progress) gets the full `k`, and one whose drafts fail (the output has left the text it was
//! copying) drafts less: after a rejection the next draft is one token longer than the part
//! that was accepted, and each fully accepted draft earns one token more, up to `k`.

use std::collections::HashMap;

use crate::request::RequestId;

/// Per-request draft lengths, at most `max` each.
#[derive(Debug, Clone)]
pub struct DraftLengths {
    max: usize,
    by_request: HashMap<RequestId, usize>,
}

impl DraftLengths {
    /// Lengths up to `max` (`k`); a request starts at `max`.
    pub fn new(max: usize) -> Self {
        DraftLengths {
            max,
            by_request: HashMap::new(),
        }
    }

    /// The most draft tokens request `id` should verify next.
    pub fn get(&self, id: RequestId) -> usize {
        self.by_request.get(&id).copied().unwrap_or(self.max)
    }

    /// Request `id` verified `proposed` draft tokens and the model accepted the first
    /// `accepted` of them.
    pub fn observe(&mut self, id: RequestId, proposed: usize, accepted: usize) {
        if proposed == 0 {
            return;
        }
        let next = if accepted >= proposed {
            self.get(id) + 1
        } else {
            accepted + 1
        };
        self.by_request.insert(id, next.clamp(1, self.max.max(1)));
    }

    /// Forgets the requests that `live` says are gone.
    pub fn retain(&mut self, live: &dyn Fn(RequestId) -> bool) {
        self.by_request.retain(|&id, _| live(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_shortens_the_next_draft_and_acceptance_lengthens_it() {
        let mut d = DraftLengths::new(4);
        assert_eq!(d.get(1), 4, "a new request drafts k tokens");
        d.observe(1, 4, 0);
        assert_eq!(d.get(1), 1, "nothing accepted: one token next");
        d.observe(1, 1, 1);
        assert_eq!(d.get(1), 2);
        d.observe(1, 2, 2);
        d.observe(1, 3, 3);
        d.observe(1, 4, 4);
        assert_eq!(d.get(1), 4, "never above k");
        d.observe(1, 4, 2);
        assert_eq!(d.get(1), 3, "two accepted: three next");
        assert_eq!(d.get(2), 4, "requests are independent");
    }

    #[test]
    fn a_short_draft_that_was_fully_accepted_grows_from_the_current_length() {
        // The proposer may find fewer tokens than allowed; full acceptance of a 1-token draft
        // at length 3 still means "go longer", not "drop to 2".
        let mut d = DraftLengths::new(6);
        d.observe(7, 6, 2);
        assert_eq!(d.get(7), 3);
        d.observe(7, 1, 1);
        assert_eq!(d.get(7), 4);
        d.observe(7, 0, 0);
        assert_eq!(d.get(7), 4, "a step without drafts changes nothing");
    }

    #[test]
    fn finished_requests_are_forgotten() {
        let mut d = DraftLengths::new(4);
        d.observe(1, 4, 0);
        d.observe(2, 4, 0);
        d.retain(&|id| id == 2);
        assert_eq!((d.get(1), d.get(2)), (4, 1));
    }
}
