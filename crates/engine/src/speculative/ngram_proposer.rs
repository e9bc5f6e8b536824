//! [`NgramProposer`]: prompt-lookup decoding. The draft is what followed the last time the
//! context's suffix appeared: for `n` from `max_n` down to `min_n`, find the latest earlier
//! occurrence of the last `n` tokens in prompt + output, and propose the (up to `k`) tokens
//! after it. No model runs, so it pays off on copy-heavy tasks (edits, quotes, code).

use crate::executor::ExecutorError;

use super::proposer::{DraftSeq, Proposer};
use super::spec_state::SpecState;

/// The tokens that followed the latest earlier occurrence of the longest suffix n-gram of
/// `tokens` (`n` from `max_n` down to `min_n`, `min_n` at least 1), at most `k` of them;
/// empty when no suffix of those lengths occurred before.
pub fn ngram_lookup(tokens: &[u32], min_n: usize, max_n: usize, k: usize) -> &[u32] {
    let len = tokens.len();
    if k == 0 {
        return &[];
    }
    for n in (min_n.max(1)..=max_n).rev() {
        if len <= n {
            continue;
        }
        let suffix = &tokens[len - n..];
        // Occurrences starting at i end before the suffix starts overlapping itself fully.
        if let Some(i) = (0..len - n).rev().find(|&i| &tokens[i..i + n] == suffix) {
            let from = i + n;
            return &tokens[from..(from + k).min(len)];
        }
    }
    &[]
}

/// Draft-free proposer: n-gram lookup in the request's own tokens. The draft found by
/// `lookahead` waits in the request's [`SpecState`] until `propose` hands it out.
#[derive(Debug, Clone)]
pub struct NgramProposer {
    min_n: usize,
    max_n: usize,
}

impl NgramProposer {
    /// Matches suffixes of `max_n` down to `min_n` tokens (vLLM's `prompt_lookup_max` and
    /// `prompt_lookup_min`); `min_n` is raised to 1 and `max_n` to `min_n`.
    pub fn new(min_n: usize, max_n: usize) -> Self {
        let min_n = min_n.max(1);
        NgramProposer {
            min_n,
            max_n: max_n.max(min_n),
        }
    }
}

impl Default for NgramProposer {
    /// Suffixes of 4 down to 2 tokens: a single token matches too often to be worth
    /// verification slots.
    fn default() -> Self {
        NgramProposer::new(2, 4)
    }
}

impl Proposer for NgramProposer {
    fn lookahead(&mut self, state: &mut SpecState, tokens: &[u32], k: usize) -> usize {
        let draft = ngram_lookup(tokens, self.min_n, self.max_n, k);
        state.stash_draft(draft);
        draft.len()
    }

    fn propose(
        &mut self,
        seqs: &mut [DraftSeq<'_>],
        drafts: &mut Vec<Vec<u32>>,
    ) -> Result<(), ExecutorError> {
        drafts.clear();
        drafts.extend(seqs.iter_mut().map(DraftSeq::take_stashed_draft));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_suffix_wins_and_latest_occurrence() {
        // suffix [7, 8] occurs at 0 (followed by 1) and at 4 (followed by 2); [6, 7, 8] only
        // at 3 (followed by 2, 9).
        let t = [7, 8, 1, 6, 7, 8, 2, 9, 6, 7, 8];
        assert_eq!(ngram_lookup(&t, 1, 3, 2), &[2, 9]);
        assert_eq!(ngram_lookup(&t, 1, 2, 3), &[2, 9, 6]);
        assert_eq!(ngram_lookup(&t, 1, 3, 0), &[] as &[u32]);
    }

    #[test]
    fn no_match_and_short_context() {
        assert_eq!(ngram_lookup(&[1, 2, 3, 4], 2, 3, 4), &[] as &[u32]);
        assert_eq!(ngram_lookup(&[5], 1, 3, 4), &[] as &[u32]);
        // [5] at 0 is followed by [5]; the draft stops at the end of the context.
        assert_eq!(ngram_lookup(&[5, 5], 1, 1, 4), &[5]);
    }

    #[test]
    fn proposer_hands_out_what_lookahead_found() {
        let mut p = NgramProposer::new(1, 2);
        let t = [1, 2, 3, 1, 2];
        let mut state = SpecState::default();
        assert_eq!(p.lookahead(&mut state, &t, 4), 3);
        let mut seqs = [DraftSeq {
            request_id: 7,
            tokens: &t,
            block_table: &[],
            k: 2,
            state: &mut state,
        }];
        let mut drafts = Vec::new();
        p.propose(&mut seqs, &mut drafts).unwrap();
        assert_eq!(drafts, vec![vec![3, 1]]);
        p.propose(&mut seqs, &mut drafts).unwrap();
        assert_eq!(
            drafts,
            vec![Vec::<u32>::new()],
            "a draft is handed out once"
        );
    }
}
