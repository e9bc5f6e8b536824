//! The value types that cross the engine's boundary: what a client submits
//! ([`EngineRequest`]) and what it receives back, as a stream of [`EngineEvent`]s.
//! [`crate::handle::EngineHandle`] is the only way in; these types are all it speaks.

use std::time::{Duration, Instant};

use crate::adapter_id::AdapterId;
use crate::model_failure::ModelFailure;
use crate::request::FinishReason;
use crate::sampling::{Logprobs, SamplingParamError, SamplingParams};

/// What a request must fit: the engine's vocabulary and context limit. Read it from
/// [`crate::handle::EngineHandle::limits`] and pass it to [`EngineRequest::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestLimits {
    /// Token ids must be below this.
    pub vocab_size: usize,
    /// Prompt plus `max_tokens` must not exceed this.
    pub max_model_len: usize,
}

/// Why [`EngineRequest::new`] refused a request. [`InvalidRequest::param`] names the offending
/// field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidRequest {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(transparent)]
    Sampling(#[from] SamplingParamError),
    #[error("prompt token id {token} is outside the vocabulary (size {vocab})")]
    TokenOutOfVocab { token: u32, vocab: usize },
    #[error("the prompt ({prompt} tokens) plus max_tokens ({max_tokens}) exceeds the context limit of {max} tokens")]
    TooLong {
        prompt: usize,
        max_tokens: usize,
        max: usize,
    },
}

impl InvalidRequest {
    /// The request field at fault (OpenAI's `param`).
    pub fn param(&self) -> &'static str {
        match self {
            InvalidRequest::EmptyPrompt | InvalidRequest::TokenOutOfVocab { .. } => "prompt",
            InvalidRequest::Sampling(e) => e.param(),
            InvalidRequest::TooLong { .. } => "max_tokens",
        }
    }
}

/// A generation request the engine can trust: built only by [`EngineRequest::new`], which checks
/// the prompt, the sampling parameters and the lengths once, so nothing downstream checks again.
#[derive(Debug, Clone)]
pub struct EngineRequest {
    prompt_ids: Vec<u32>,
    sampling: SamplingParams,
    priority: i32,
    arrival: Instant,
    max_queue_time: Option<Duration>,
    adapter: Option<AdapterId>,
    cache_salt: Option<String>,
    ttft_slo: Option<Duration>,
    /// The traced parent of the request's engine work, when it is traced.
    trace: Option<crate::trace_parent::TraceParent>,
}

impl EngineRequest {
    /// Validates `prompt_ids` and `sampling` against `limits`: a non-empty prompt of in-vocabulary
    /// ids, sampling parameters in range, and prompt plus `max_tokens` within the context limit.
    /// Priority 0, arrival now, no queue timeout.
    pub fn new(
        prompt_ids: Vec<u32>,
        sampling: SamplingParams,
        limits: &RequestLimits,
    ) -> Result<Self, InvalidRequest> {
        if prompt_ids.is_empty() {
            return Err(InvalidRequest::EmptyPrompt);
        }
        sampling.validate()?;
        sampling
            .logit_bias
            .check_vocab(limits.vocab_size)
            .map_err(SamplingParamError::from)?;
        if let Some(&token) = prompt_ids
            .iter()
            .find(|&&t| t as usize >= limits.vocab_size)
        {
            return Err(InvalidRequest::TokenOutOfVocab {
                token,
                vocab: limits.vocab_size,
            });
        }
        let (prompt, max_tokens) = (prompt_ids.len(), sampling.max_tokens);
        if prompt.saturating_add(max_tokens) > limits.max_model_len {
            return Err(InvalidRequest::TooLong {
                prompt,
                max_tokens,
                max: limits.max_model_len,
            });
        }
        Ok(EngineRequest {
            prompt_ids,
            sampling,
            priority: 0,
            adapter: None,
            cache_salt: None,
            arrival: Instant::now(),
            max_queue_time: None,
            ttft_slo: None,
            trace: None,
        })
    }

    /// The chained hashes of the prompt's full blocks of `block_size` tokens, exactly as the
    /// engine's prefix cache names them (same namespace, adapter and salt): a router computes
    /// them to find the engine that holds the prompt's prefix.
    pub fn prompt_block_hashes(&self, block_size: usize) -> Vec<crate::kv::BlockHash> {
        let key = crate::request::prefix_key(crate::request::ENGINE_CACHE_KEY, self.adapter);
        let mut hashes = Vec::new();
        crate::kv::block_hash::extend_block_hashes(
            &mut hashes,
            &self.prompt_ids,
            block_size,
            key,
            self.cache_salt.as_deref(),
        );
        hashes
    }

    /// Run with LoRA adapter `adapter` (which the executor must have loaded).
    pub fn with_adapter(mut self, adapter: Option<AdapterId>) -> Self {
        self.adapter = adapter;
        self
    }

    /// Constrain the output to `grammar` (structured output); check that it compiles first
    /// (`EngineHandle::validate_grammar`), or the request fails when the engine admits it.
    pub fn with_grammar(mut self, grammar: Option<crate::constraint::GrammarSpec>) -> Self {
        self.sampling.grammar = grammar;
        self
    }

    /// The LoRA adapter the request runs with.
    pub fn adapter(&self) -> Option<AdapterId> {
        self.adapter
    }

    /// Share cached prefixes only with requests of the same `salt` (`None`: the shared cache).
    pub fn with_cache_salt(mut self, salt: Option<String>) -> Self {
        self.cache_salt = salt;
        self
    }

    /// Traces the request under `parent`: the engine reports the steps it takes part in
    /// ([`crate::step_trace`]).
    pub fn with_trace(mut self, parent: Option<crate::trace_parent::TraceParent>) -> Self {
        self.trace = parent;
        self
    }

    /// The parent of the request's engine work, when it is traced.
    pub fn trace(&self) -> Option<crate::trace_parent::TraceParent> {
        self.trace
    }

    /// The prefix-cache salt.
    pub fn cache_salt(&self) -> Option<&str> {
        self.cache_salt.as_deref()
    }

    /// Lower runs first (vLLM's convention); default 0.
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// When the request reached the server (for queue time and TTFT); default: construction.
    pub fn with_arrival(mut self, arrival: Instant) -> Self {
        self.arrival = arrival;
        self
    }

    /// Fail the request if it has not started running within this time.
    pub fn with_max_queue_time(mut self, limit: Option<Duration>) -> Self {
        self.max_queue_time = limit;
        self
    }

    /// A first-token latency objective (from arrival): the engine refuses the request at once
    /// with [`EngineFailure::SloUnattainable`] when it predicts the objective cannot be met, and
    /// counts whether an admitted request met it. `None` (the default): no objective.
    pub fn with_ttft_slo(mut self, slo: Option<Duration>) -> Self {
        self.ttft_slo = slo;
        self
    }

    /// The first-token latency objective, if any.
    pub fn ttft_slo(&self) -> Option<Duration> {
        self.ttft_slo
    }

    /// The same request with its seed advanced by `offset` (a request with `n` choices runs
    /// choice `i` with `seed + i`, so sampled choices differ); unseeded requests are unchanged.
    pub fn with_seed_offset(&self, offset: u64) -> Self {
        let mut req = self.clone();
        if let Some(seed) = req.sampling.seed.as_mut() {
            *seed = seed.wrapping_add(offset);
        }
        req
    }

    /// The prompt's token ids.
    pub fn prompt_ids(&self) -> &[u32] {
        &self.prompt_ids
    }

    /// The validated sampling parameters.
    pub fn sampling(&self) -> &SamplingParams {
        &self.sampling
    }

    /// Scheduling priority (lower runs first).
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// Arrival time.
    pub fn arrival(&self) -> Instant {
        self.arrival
    }

    /// Queue timeout.
    pub fn max_queue_time(&self) -> Option<Duration> {
        self.max_queue_time
    }

    /// Takes the prompt and parameters apart (for the engine, which owns them from here on).
    pub(crate) fn into_parts(self) -> (Vec<u32>, SamplingParams) {
        (self.prompt_ids, self.sampling)
    }
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// Latencies of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RequestTimings {
    pub queue: Duration,
    pub time_to_first_token: Duration,
    pub end_to_end: Duration,
}

/// One generated token.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenEvent {
    pub id: u32,
    /// Newly completed text (may be empty while a multi-byte character or a possible stop
    /// string is withheld).
    pub text: String,
    /// Present when the request asked for logprobs.
    pub logprobs: Option<Logprobs>,
}

/// What a request's stream yields, in order: tokens, then exactly one `Finished` or `Failed`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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

/// Why a request ended without finishing normally (see [`EngineFailure::finish_reason`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum EngineFailure {
    #[error("request waited longer than the queue timeout ({0:?})")]
    QueueTimeout(Duration),
    #[error("the prompt and max_tokens ({0} tokens) do not fit in the KV cache")]
    TooLong(usize),
    /// The model step failed the request; the cause is typed.
    #[error("the model failed: {0}")]
    Model(#[from] ModelFailure),
    #[error("internal engine error: {0}")]
    Internal(String),
    /// The request's LoRA adapter was unloaded meanwhile, or cannot be made resident.
    #[error("{0}")]
    Adapter(String),
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// The request's first-token objective cannot be met with the work queued ahead of it
    /// (refused at admission, before it used any capacity).
    #[error(
        "the time-to-first-token objective of {objective_ms} ms cannot be met: about \
         {predicted_ms} ms of queued work is ahead of this request; retry later or relax ttft_slo_ms"
    )]
    SloUnattainable {
        /// The predicted time to the first token, from arrival.
        predicted_ms: u64,
        /// The request's objective.
        objective_ms: u64,
    },
}

impl EngineFailure {
    /// A stable label for the failure's kind (the `cause` label of
    /// `kestrel:request_failures_total`).
    pub fn kind(&self) -> &'static str {
        match self {
            EngineFailure::QueueTimeout(_) => "queue_timeout",
            EngineFailure::TooLong(_) => "too_long",
            EngineFailure::Model(_) => "model",
            EngineFailure::Internal(_) => "internal",
            EngineFailure::Adapter(_) => "adapter",
            EngineFailure::ShuttingDown => "shutting_down",
            EngineFailure::SloUnattainable { .. } => "slo_unattainable",
        }
    }

    /// How a live request that fails this way ends: [`FinishReason::Abort`] when the server
    /// gave up on it (its queue time ran out, the engine is shutting down),
    /// [`FinishReason::Error`] when something failed.
    pub fn finish_reason(&self) -> FinishReason {
        match self {
            EngineFailure::QueueTimeout(_) | EngineFailure::ShuttingDown => FinishReason::Abort,
            _ => FinishReason::Error,
        }
    }
}

/// Why `submit` refused a request outright.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("too many concurrent requests (limit {0})")]
    Overloaded(usize),
    #[error("the engine has stopped")]
    Stopped,
}

/// A snapshot of the engine's state, for health checks and gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// KV blocks released because they fell out of the attention window of every layer.
    #[serde(default)]
    pub kv_window_blocks_freed_total: u64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    /// KV blocks no request holds (free, or kept only by the prefix cache).
    #[serde(default)]
    pub kv_free_blocks: usize,
    /// Occupied KV slots no running sequence reads, over occupied slots, 0..=1 (see
    /// [`crate::kv::KvFragmentation`]).
    #[serde(default)]
    pub kv_fragmentation: f64,
    /// Idle KV checks run (each time the engine ran out of work), and how many found a leak
    /// or a broken block-pool invariant.
    #[serde(default)]
    pub kv_idle_checks_total: u64,
    #[serde(default)]
    pub kv_idle_check_failures_total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_failure::ModelFailure;
    use crate::sampling::SampleError;

    #[test]
    fn failures_end_as_errors_and_the_server_giving_up_as_aborts() {
        let model = EngineFailure::from(ModelFailure::from(SampleError::NoFiniteLogits));
        assert_eq!(model.finish_reason(), FinishReason::Error);
        assert_eq!(model.kind(), "model");
        assert_eq!(
            EngineFailure::Internal("x".into()).finish_reason(),
            FinishReason::Error
        );
        let timeout = EngineFailure::QueueTimeout(Duration::from_secs(1));
        assert_eq!(timeout.finish_reason(), FinishReason::Abort);
        assert_eq!(
            EngineFailure::ShuttingDown.finish_reason(),
            FinishReason::Abort
        );
    }
}
