//! [`SchedulerError`]: why the scheduler refused a configuration, a request or an update.

use crate::kv::KvError;
use crate::request::RequestId;

/// Errors from the scheduler's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    /// The KV-cache part of the configuration is invalid.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// Another part of the configuration is invalid.
    #[error("invalid scheduler configuration: {0}")]
    InvalidConfig(&'static str),
    /// A request with this id is already queued or running.
    #[error("request {0} already exists")]
    DuplicateRequest(RequestId),
    /// The prompt has no tokens.
    #[error("request {0} has an empty prompt")]
    EmptyPrompt(RequestId),
    /// `max_tokens` is zero.
    #[error("request {0}: max_tokens must be at least 1")]
    ZeroMaxTokens(RequestId),
    /// The prompt leaves no room for one generated token.
    #[error("request {id}: prompt of {len} tokens exceeds the limit of {max}")]
    PromptTooLong {
        /// The request.
        id: RequestId,
        /// Its prompt length.
        len: usize,
        /// Longest prompt accepted.
        max: usize,
    },
    /// `update` got a different number of sampled tokens than sequences that sample.
    #[error("expected {expected} sampled tokens, got {got}")]
    SampledCountMismatch {
        /// Sequences with logits rows.
        expected: usize,
        /// Tokens passed.
        got: usize,
    },
    /// A sequence's emitted tokens do not fit its logits rows (none, or more than its rows).
    #[error("sequence of request {id}: {emitted} tokens emitted from {rows} logits rows")]
    EmittedCountMismatch {
        /// The request.
        id: RequestId,
        /// Tokens emitted for it.
        emitted: usize,
        /// Its logits rows.
        rows: usize,
    },
}
