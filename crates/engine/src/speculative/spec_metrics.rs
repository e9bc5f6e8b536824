//! Speculative-decoding counters, named as vLLM names them, and [`SpecCounters`] (the same
//! counts kept in the engine for its stats).

use metrics::{counter, describe_counter, Unit};

/// Metric names, exactly as exported.
pub mod names {
    /// Counter: verification steps of a sequence that had at least one draft token.
    pub const NUM_DRAFTS_TOTAL: &str = "vllm:spec_decode_num_drafts_total";
    /// Counter: draft tokens proposed and verified.
    pub const NUM_DRAFT_TOKENS_TOTAL: &str = "vllm:spec_decode_num_draft_tokens_total";
    /// Counter: draft tokens accepted.
    pub const NUM_ACCEPTED_TOKENS_TOTAL: &str = "vllm:spec_decode_num_accepted_tokens_total";
    /// Counter: tokens emitted by verification steps (accepted drafts plus one sampled token
    /// per step).
    pub const NUM_EMITTED_TOKENS_TOTAL: &str = "vllm:spec_decode_num_emitted_tokens_total";
}

/// Registers help text for the speculative-decoding counters.
pub fn describe_metrics() {
    use names::*;
    describe_counter!(
        NUM_DRAFTS_TOTAL,
        Unit::Count,
        "Sequence steps that verified draft tokens"
    );
    describe_counter!(
        NUM_DRAFT_TOKENS_TOTAL,
        Unit::Count,
        "Draft tokens proposed and verified"
    );
    describe_counter!(
        NUM_ACCEPTED_TOKENS_TOTAL,
        Unit::Count,
        "Draft tokens accepted"
    );
    describe_counter!(
        NUM_EMITTED_TOKENS_TOTAL,
        Unit::Count,
        "Tokens emitted by steps that verified draft tokens"
    );
}

/// Cumulative speculative-decoding counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecCounters {
    /// Sequence steps that verified at least one draft token.
    pub num_drafts: u64,
    /// Draft tokens verified.
    pub num_draft_tokens: u64,
    /// Draft tokens accepted.
    pub num_accepted_tokens: u64,
    /// Tokens emitted by those steps.
    pub num_emitted_tokens: u64,
}

impl SpecCounters {
    /// Counts one sequence's verification of `drafts` tokens, `accepted` of them accepted,
    /// and publishes the increments.
    pub(crate) fn record(&mut self, drafts: usize, accepted: usize) {
        let (d, a) = (drafts as u64, accepted as u64);
        self.num_drafts += 1;
        self.num_draft_tokens += d;
        self.num_accepted_tokens += a;
        self.num_emitted_tokens += a + 1;
        counter!(names::NUM_DRAFTS_TOTAL).increment(1);
        counter!(names::NUM_DRAFT_TOKENS_TOTAL).increment(d);
        counter!(names::NUM_ACCEPTED_TOKENS_TOTAL).increment(a);
        counter!(names::NUM_EMITTED_TOKENS_TOTAL).increment(a + 1);
    }
}
