//! [`Scheduler::backlog`]: the work queued ahead of a request that has not been added yet, for
//! the first-token prediction ([`crate::ttft_predictor`]).

use crate::request::Request;
use crate::ttft_predictor::Backlog;

use super::Scheduler;

impl Scheduler {
    /// What must run before `req`'s first token if it were queued now: the prompt tokens of
    /// every waiting request of the same or an earlier queue class (they are admitted first), the
    /// unfinished prompts of running requests, and `req`'s own prompt less its prefix-cache
    /// hits (looked up now; its block hashes are kept for admission). Decoding requests are
    /// the running ones past their prompt plus the requests ahead (which decode once their
    /// prompt is done), at most `max_num_seqs`. When the batch has no free slot for `req`, the
    /// wait for one is the remaining `max_tokens` of the request (running, or ahead in the
    /// queue) that would free it, taking the shortest first.
    pub fn backlog(&mut self, req: &mut Request) -> Backlog {
        let class = self.policy.queue_class(req);
        let mut prefill_tokens = 0;
        let mut ahead = 0;
        let mut remaining_outputs = Vec::with_capacity(self.running.len());
        for id in self.waiting.iter() {
            let Some(w) = self.requests.get(&id) else {
                continue;
            };
            if self.policy.queue_class(w) <= class {
                prefill_tokens += w.num_tokens() - w.num_computed_tokens();
                ahead += 1;
                remaining_outputs.push(w.params().max_tokens);
            }
        }
        let mut decoding = 0;
        for r in self.running.iter().filter_map(|id| self.requests.get(id)) {
            let uncomputed = r.num_tokens() - r.num_computed_tokens();
            if uncomputed <= 1 && !r.output_token_ids().is_empty() {
                decoding += 1;
            } else {
                prefill_tokens += uncomputed;
                ahead += 1;
            }
            let left = r
                .params()
                .max_tokens
                .saturating_sub(r.output_token_ids().len());
            remaining_outputs.push(left);
        }
        let cached = self.kv.get_computed_blocks(req).num_tokens;
        prefill_tokens += req.num_tokens().saturating_sub(cached);
        let waiting_ahead = ahead - (self.running.len() - decoding);
        Backlog {
            prefill_tokens,
            decode_seqs: (decoding + ahead).min(self.config.max_num_seqs),
            slot_wait_steps: self.slot_wait(remaining_outputs, waiting_ahead),
            step_budget: self.config.max_num_batched_tokens,
        }
    }

    /// Decode steps until a batch slot is free for a request queued behind `waiting_ahead`
    /// others, given the running requests' remaining output budgets.
    fn slot_wait(&self, mut remaining: Vec<usize>, waiting_ahead: usize) -> usize {
        let wanted = self.running.len() + waiting_ahead + 1;
        let Some(to_end) = wanted.checked_sub(self.config.max_num_seqs) else {
            return 0;
        };
        if to_end == 0 || remaining.is_empty() {
            // Only reachable when nothing runs or waits ahead, so a slot is free.
            return 0;
        }
        remaining.sort_unstable();
        remaining[(to_end - 1).min(remaining.len() - 1)]
    }
}
