//! [`DraftLengths`]: the rule that sets each request's draft length from how many of its
//! drafts the model accepts (the length itself lives in the request's [`SpecState`]).
//!
//! Verifying `j` draft tokens computes `j + 1` positions, and on a CPU those are not free: a
//! 5-position pass of a small model costs about twice a 1-position step. Drafts the model
//! rejects are paid for all the same. So a request whose drafts keep being accepted (a copy in
//! progress) gets the full `k`, and one whose drafts fail (the output has left the text it was
//! copying) drafts less: after a rejection the next draft is one token longer than the part
//! that was accepted, and each fully accepted draft earns one token more, up to `k`.

use super::spec_state::SpecState;

/// Adaptive draft lengths, at most `max` each.
#[derive(Debug, Clone, Copy)]
pub struct DraftLengths {
    max: usize,
}

impl DraftLengths {
    /// Lengths up to `max` (`k`); a request starts at `max`.
    pub fn new(max: usize) -> Self {
        DraftLengths { max }
    }

    /// The most draft tokens the request with `state` should verify next.
    pub fn get(&self, state: &SpecState) -> usize {
        state.draft_length().unwrap_or(self.max)
    }

    /// The request with `state` verified `proposed` draft tokens and the model accepted the
    /// first `accepted` of them.
    pub fn observe(&self, state: &mut SpecState, proposed: usize, accepted: usize) {
        if proposed == 0 {
            return;
        }
        let next = if accepted >= proposed {
            self.get(state) + 1
        } else {
            accepted + 1
        };
        state.set_draft_length(next.clamp(1, self.max.max(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_shortens_the_next_draft_and_acceptance_lengthens_it() {
        let d = DraftLengths::new(4);
        let (mut s1, s2) = (SpecState::default(), SpecState::default());
        assert_eq!(d.get(&s1), 4, "a new request drafts k tokens");
        d.observe(&mut s1, 4, 0);
        assert_eq!(d.get(&s1), 1, "nothing accepted: one token next");
        d.observe(&mut s1, 1, 1);
        assert_eq!(d.get(&s1), 2);
        d.observe(&mut s1, 2, 2);
        d.observe(&mut s1, 3, 3);
        d.observe(&mut s1, 4, 4);
        assert_eq!(d.get(&s1), 4, "never above k");
        d.observe(&mut s1, 4, 2);
        assert_eq!(d.get(&s1), 3, "two accepted: three next");
        assert_eq!(d.get(&s2), 4, "requests are independent");
    }

    #[test]
    fn a_short_draft_that_was_fully_accepted_grows_from_the_current_length() {
        // The proposer may find fewer tokens than allowed; full acceptance of a 1-token draft
        // at length 3 still means "go longer", not "drop to 2".
        let d = DraftLengths::new(6);
        let mut s = SpecState::default();
        d.observe(&mut s, 6, 2);
        assert_eq!(d.get(&s), 3);
        d.observe(&mut s, 1, 1);
        assert_eq!(d.get(&s), 4);
        d.observe(&mut s, 0, 0);
        assert_eq!(d.get(&s), 4, "a step without drafts changes nothing");
    }
}
