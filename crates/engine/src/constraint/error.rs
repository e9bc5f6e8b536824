//! [`ConstraintError`]: why a grammar could not be compiled or followed.

/// A grammar that does not compile, or a matcher that failed while generating.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    /// The grammar is malformed or unsupported (the grammar compiler's message).
    #[error("invalid {kind}: {message}")]
    Invalid {
        /// What was being compiled (`JSON schema`, `regex`, `choice`, `grammar`).
        kind: &'static str,
        message: String,
    },
    /// The token vocabulary could not be turned into a grammar environment.
    #[error("cannot build the token environment for constrained decoding: {0}")]
    TokenEnv(String),
    /// This engine was started without constrained decoding.
    #[error("structured output is not available on this engine")]
    Unavailable,
    /// The matcher failed while generating (the request fails alone).
    #[error("structured output constraint failed: {0}")]
    Matcher(String),
}
