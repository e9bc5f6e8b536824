//! [`PromptPassError`]: why a one-off pass over a prompt failed — an embedding
//! ([`crate::handle::EngineHandle::embed`]) or prompt logprobs
//! ([`crate::handle::EngineHandle::prompt_logprobs`]).
//!
//! Such a pass runs the prompt through the executor on the engine thread, between steps, with
//! KV blocks lent by the scheduler for that call only and freed right after it (so it never
//! leaks blocks nor touches the prefix cache). An embedding takes the last token's final
//! hidden state ([`crate::executor::Executor::embed`]); prompt logprobs take every position's
//! logits, in chunks.

use crate::sampling::Logprobs;

/// One prompt token's score: its log-probability given the tokens before it, the likeliest
/// tokens at its position, and its rank there (1 for the likeliest token).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptTokenScore {
    pub logprobs: Logprobs,
    pub rank: usize,
}

/// Why a pass over a prompt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptPassError {
    #[error("the input is empty")]
    EmptyInput,
    #[error("input token id {token} is outside the vocabulary (size {vocab})")]
    TokenOutOfVocab { token: u32, vocab: usize },
    #[error("the input has {len} tokens, more than the context limit of {max}")]
    TooLong { len: usize, max: usize },
    #[error("the KV cache has no room for {blocks} blocks now; retry later")]
    NoKvSpace { blocks: usize },
    #[error("the model failed: {0}")]
    Model(String),
    #[error("the engine has stopped")]
    Stopped,
}
