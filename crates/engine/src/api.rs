//! The value types that cross the engine's boundary: what a client submits
//! ([`EngineRequest`]) and what it receives back, as a stream of [`EngineEvent`]s.
//! [`crate::handle::EngineHandle`] is the only way in; these types are all it speaks.

use std::time::{Duration, Instant};

use crate::request::FinishReason;
use crate::sampling::{Logprobs, SamplingParams};

/// A validated generation request (the server has already templated and tokenized it and
/// checked its lengths and parameters).
#[derive(Debug, Clone)]
pub struct EngineRequest {
    pub prompt_ids: Vec<u32>,
    pub sampling: SamplingParams,
    /// Higher runs first; default 0.
    pub priority: i32,
    /// When the request reached the server (for queue time and TTFT).
    pub arrival: Instant,
    /// Abort the request if it has not started running within this time.
    pub max_queue_time: Option<Duration>,
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// Latencies of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestTimings {
    pub queue: Duration,
    pub time_to_first_token: Duration,
    pub end_to_end: Duration,
}

/// One generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    pub id: u32,
    /// Newly completed text (may be empty while a multi-byte character or a possible stop
    /// string is withheld).
    pub text: String,
    /// Present when the request asked for logprobs.
    pub logprobs: Option<Logprobs>,
}

/// What a request's stream yields, in order: tokens, then exactly one `Finished` or `Failed`.
#[derive(Debug, Clone)]
pub enum EngineEvent {
    Token(TokenEvent),
    Finished {
        reason: FinishReason,
        /// Text withheld until the end (flushed by the detokenizer/stop matcher).
        text: String,
        usage: Usage,
        timings: RequestTimings,
    },
    Failed(EngineFailure),
}

/// Why a request ended without finishing normally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineFailure {
    #[error("request waited longer than the queue timeout ({0:?})")]
    QueueTimeout(Duration),
    #[error("the prompt and max_tokens ({0} tokens) do not fit in the KV cache")]
    TooLong(usize),
    #[error("the model failed: {0}")]
    Model(String),
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// Why `submit` refused a request outright.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("too many concurrent requests (limit {0})")]
    Overloaded(usize),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("the engine has stopped")]
    Stopped,
}

/// A snapshot of the engine's state, for health checks and gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineStats {
    pub running: usize,
    pub waiting: usize,
    /// Fraction of KV blocks in use, 0..=1.
    pub kv_usage: f64,
    pub num_kv_blocks: usize,
    pub block_size: usize,
    pub preemptions_total: u64,
    pub prefix_cache_queries_total: u64,
    pub prefix_cache_hits_total: u64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
}
