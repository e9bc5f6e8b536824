//! [`EmbedError`]: why an embedding ([`crate::handle::EngineHandle::embed`]) failed.
//!
//! An embedding runs the whole prompt in one forward pass on the engine thread, between
//! steps, with KV blocks lent by the scheduler for that call only and freed right after it
//! (so it never leaks blocks nor touches the prefix cache); the executor returns the last
//! token's final hidden state ([`crate::executor::Executor::embed`]).

/// Why an embedding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
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
