//! [`SpeculativeConfig`]: how many draft tokens to propose and when to stop speculating.

/// Speculative decoding limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculativeConfig {
    /// Most draft tokens proposed per request and step (`k`).
    pub num_speculative_tokens: usize,
    /// Speculation backs off for a step when running requests × (`k` + 1) exceed this many
    /// tokens (the batch is compute-bound: rejected drafts would cost real time).
    pub max_batch_tokens: usize,
    /// Whether each request's draft length follows its acceptance (see
    /// [`super::DraftLengths`]); false: always up to `num_speculative_tokens`.
    pub adaptive_length: bool,
}

impl SpeculativeConfig {
    /// Default back-off threshold, in tokens: on a CPU a decode batch stops being bound by
    /// weight reads at a few dozen rows.
    pub const DEFAULT_MAX_BATCH_TOKENS: usize = 48;

    /// `k` draft tokens with the default back-off threshold and adaptive draft lengths.
    pub fn new(num_speculative_tokens: usize) -> Self {
        SpeculativeConfig {
            num_speculative_tokens,
            max_batch_tokens: Self::DEFAULT_MAX_BATCH_TOKENS,
            adaptive_length: true,
        }
    }

    /// Whether a step with `running` requests should speculate.
    pub fn speculates_with(&self, running: usize) -> bool {
        self.num_speculative_tokens > 0
            && running.saturating_mul(self.num_speculative_tokens + 1) <= self.max_batch_tokens
    }
}
