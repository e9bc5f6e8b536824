//! [`Speculator`]: the engine's speculative-decoding step hooks around the scheduler.

use crate::request::{Request, RequestId};
use crate::scheduler::{Scheduler, SchedulerOutput};

use super::draft_length::DraftLengths;
use super::proposer::{DraftSeq, Proposer};
use super::spec_metrics::SpecCounters;
use super::speculative_config::SpeculativeConfig;

/// A proposer with its limits and counters; the engine core calls [`Speculator::plan`] before
/// scheduling and [`Speculator::propose`] after.
pub struct Speculator {
    config: SpeculativeConfig,
    proposer: Box<dyn Proposer>,
    counters: SpecCounters,
    /// Each request's draft length, when it adapts to acceptance.
    lengths: Option<DraftLengths>,
    /// Scratch: this step's drafts, one per proposing sequence.
    drafts: Vec<Vec<u32>>,
}

impl std::fmt::Debug for Speculator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speculator")
            .field("config", &self.config)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Speculator {
    /// Speculation with `proposer` under `config`.
    pub fn new(config: SpeculativeConfig, proposer: Box<dyn Proposer>) -> Self {
        Speculator {
            lengths: config
                .adaptive_length
                .then(|| DraftLengths::new(config.num_speculative_tokens)),
            config,
            proposer,
            counters: SpecCounters::default(),
            drafts: Vec::new(),
        }
    }

    /// The limits.
    pub fn config(&self) -> &SpeculativeConfig {
        &self.config
    }

    /// Counts since start.
    pub fn counters(&self) -> SpecCounters {
        self.counters
    }

    /// Request `id` verified `proposed` draft tokens, of which the first `accepted` matched.
    pub(crate) fn record(&mut self, id: RequestId, proposed: usize, accepted: usize) {
        self.counters.record(proposed, accepted);
        if let Some(lengths) = &mut self.lengths {
            lengths.observe(id, proposed, accepted);
        }
    }

    /// Sets every running request's draft-token slots for the next step: none when the batch
    /// is too big to speculate, for a request that cannot (see
    /// [`crate::request::Generation::can_speculate`]) or is not at its last token, else what
    /// the proposer asks for within `k`, the request's `max_tokens` and the context limit.
    pub(crate) fn plan(&mut self, scheduler: &mut Scheduler) {
        let live = |id: RequestId| scheduler.request(id).is_some();
        self.proposer.retain(&live);
        if let Some(lengths) = &mut self.lengths {
            lengths.retain(&live);
        }
        let ids: Vec<RequestId> = scheduler.running_ids().to_vec();
        let on = self.config.speculates_with(ids.len());
        let max_model_len = scheduler.max_model_len();
        for id in ids {
            let Some(req) = scheduler.request_mut(id) else {
                continue;
            };
            let k = if on {
                self.budget(req, max_model_len)
            } else {
                0
            };
            let k = if k > 0 {
                self.proposer.lookahead(id, req.all_token_ids(), k)
            } else {
                0
            };
            req.set_spec_lookahead(k.min(self.config.num_speculative_tokens));
        }
    }

    /// Most draft tokens `req` may verify next step.
    fn budget(&self, req: &Request, max_model_len: usize) -> usize {
        if req.num_computed_tokens() + 1 != req.num_tokens() || !req.generation().can_speculate() {
            return 0;
        }
        let k = self
            .lengths
            .as_ref()
            .map_or(self.config.num_speculative_tokens, |l| l.get(req.id()));
        // A step emits up to k + 1 tokens; drafting past max_tokens or the context is waste.
        let left = req
            .params()
            .max_tokens
            .saturating_sub(req.output_token_ids().len() + 1);
        let room = max_model_len.saturating_sub(req.num_tokens() + 1);
        k.min(left).min(room)
    }

    /// Fills the lookahead slots of `out` with proposed draft tokens (ids below `vocab`): each
    /// such sequence runs `[last, d1..dj]` and wants `j + 1` logits rows; its block table is cut
    /// to the positions it computes. A proposer error only costs this step's drafts.
    pub(crate) fn propose(
        &mut self,
        out: &mut SchedulerOutput,
        scheduler: &Scheduler,
        vocab: usize,
    ) {
        if out.lookahead.is_empty() {
            return;
        }
        let mut index = Vec::new();
        let seqs: Vec<DraftSeq<'_>> = out
            .batch
            .seqs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let k = out.lookahead(i);
                if k == 0 || s.num_logits != 1 {
                    return None;
                }
                let req = scheduler.request(s.request_id)?;
                index.push(i);
                Some(DraftSeq {
                    request_id: s.request_id,
                    tokens: req.all_token_ids(),
                    block_table: &s.block_table,
                    k,
                })
            })
            .collect();
        let mut drafts = std::mem::take(&mut self.drafts);
        if let Err(e) = self.proposer.propose(&seqs, &mut drafts) {
            tracing::warn!(error = %e, "draft proposal failed; decoding without drafts");
            drafts.clear();
        }
        drop(seqs);
        let block_size = scheduler.config().block_size;
        for (j, &i) in index.iter().enumerate() {
            let k = out.lookahead(i);
            let seq = &mut out.batch.seqs[i];
            let draft = drafts.get(j).map_or(&[][..], Vec::as_slice);
            let n = draft
                .iter()
                .take(k)
                .take_while(|&&t| (t as usize) < vocab)
                .count();
            seq.tokens.extend_from_slice(&draft[..n]);
            seq.num_logits = 1 + n;
            let end = seq.start_pos + seq.tokens.len();
            seq.block_table.truncate(end.div_ceil(block_size));
        }
        self.drafts = drafts;
    }
}
