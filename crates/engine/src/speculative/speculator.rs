//! [`Speculator`]: the engine's speculative-decoding step hooks around the scheduler.

use crate::request::{Request, RequestId};
use crate::scheduler::{Scheduler, SchedulerOutput};

use super::draft_length::DraftLengths;
use super::proposer::{DraftSeq, Proposer};
use super::spec_metrics::SpecCounters;
use super::spec_state::SpecState;
use super::speculative_config::SpeculativeConfig;

/// A proposer with its limits and counters; the engine core calls [`Speculator::plan`] before
/// scheduling and [`Speculator::propose`] after.
pub struct Speculator {
    config: SpeculativeConfig,
    proposer: Box<dyn Proposer>,
    counters: SpecCounters,
    /// The draft-length rule, when lengths adapt to acceptance.
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

    /// The request with speculation state `state` verified `proposed` draft tokens, of which
    /// the first `accepted` matched.
    pub(crate) fn record(&mut self, state: &mut SpecState, proposed: usize, accepted: usize) {
        self.counters.record(proposed, accepted);
        if let Some(lengths) = &self.lengths {
            lengths.observe(state, proposed, accepted);
        }
    }

    /// Sets every running request's draft-token slots for the next step: none when the batch
    /// is too big to speculate, for a request that cannot (see
    /// [`crate::request::Generation::can_speculate`]) or is not at its last token, else what
    /// the proposer asks for within `k`, the request's `max_tokens` and the context limit.
    pub(crate) fn plan(&mut self, scheduler: &mut Scheduler) {
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
                let (tokens, state) = req.spec_parts_mut();
                self.proposer.lookahead(state, tokens, k)
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
            .map_or(self.config.num_speculative_tokens, |l| {
                l.get(req.spec_state())
            });
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
        scheduler: &mut Scheduler,
        vocab: usize,
    ) {
        if out.lookahead.is_empty() {
            return;
        }
        let index: Vec<usize> = (0..out.batch.seqs.len())
            .filter(|&i| {
                let s = &out.batch.seqs[i];
                out.lookahead(i) > 0
                    && s.num_logits == 1
                    && scheduler.request(s.request_id).is_some()
            })
            .collect();
        // Each proposing request lends its state for the proposal and gets it back after.
        let mut states: Vec<SpecState> = index
            .iter()
            .map(|&i| {
                let id = out.batch.seqs[i].request_id;
                scheduler
                    .request_mut(id)
                    .map(|r| std::mem::take(r.spec_state_mut()))
                    .unwrap_or_default()
            })
            .collect();
        let mut drafts = std::mem::take(&mut self.drafts);
        self.propose_drafts(out, scheduler, &index, &mut states, &mut drafts);
        for (&i, state) in index.iter().zip(states) {
            if let Some(req) = scheduler.request_mut(out.batch.seqs[i].request_id) {
                *req.spec_state_mut() = state;
            }
        }
        fill_slots(out, &index, &drafts, scheduler.config().block_size, vocab);
        self.drafts = drafts;
    }

    /// Asks the proposer for the drafts of the sequences `index` names, whose states are
    /// `states`; a proposer error leaves no drafts.
    fn propose_drafts(
        &mut self,
        out: &SchedulerOutput,
        scheduler: &Scheduler,
        index: &[usize],
        states: &mut [SpecState],
        drafts: &mut Vec<Vec<u32>>,
    ) {
        let mut seqs: Vec<DraftSeq<'_>> = index
            .iter()
            .zip(states.iter_mut())
            .filter_map(|(&i, state)| {
                let s = &out.batch.seqs[i];
                let req = scheduler.request(s.request_id)?;
                Some(DraftSeq {
                    request_id: s.request_id,
                    tokens: req.all_token_ids(),
                    block_table: &s.block_table,
                    k: out.lookahead(i),
                    state,
                })
            })
            .collect();
        if let Err(e) = self.proposer.propose(&mut seqs, drafts) {
            tracing::warn!(error = %e, "draft proposal failed; decoding without drafts");
            drafts.clear();
        }
    }
}

/// Appends each proposing sequence's draft (ids below `vocab`, at most its lookahead) to
/// its batch tokens, asks for one logits row per draft token more, and cuts its block table
/// to the positions it computes.
fn fill_slots(
    out: &mut SchedulerOutput,
    index: &[usize],
    drafts: &[Vec<u32>],
    block_size: usize,
    vocab: usize,
) {
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
}
