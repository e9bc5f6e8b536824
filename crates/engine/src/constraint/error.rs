//! [`ConstraintError`]: why a grammar could not be compiled or followed.

/// A grammar that does not compile, or a matcher that failed while generating.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
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

/// [`ConstraintError`] as read back from the wire: an owned kind, mapped to its static label
/// (a derived `Deserialize` could only borrow the `&'static str`).
#[derive(serde::Deserialize)]
enum ConstraintErrorWire {
    Invalid { kind: String, message: String },
    TokenEnv(String),
    Unavailable,
    Matcher(String),
}

/// The [`ConstraintError::Invalid`] kinds ([`super::GrammarSpec::kind`]).
const GRAMMAR_KINDS: [&str; 5] = ["JSON schema", "JSON object", "regex", "choice", "grammar"];

impl<'de> serde::Deserialize<'de> for ConstraintError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ConstraintErrorWire::deserialize(d).map(ConstraintError::from)
    }
}

impl From<ConstraintErrorWire> for ConstraintError {
    /// A kind this build does not know reads back as `grammar`.
    fn from(wire: ConstraintErrorWire) -> Self {
        match wire {
            ConstraintErrorWire::Invalid { kind, message } => ConstraintError::Invalid {
                kind: GRAMMAR_KINDS
                    .into_iter()
                    .find(|k| *k == kind)
                    .unwrap_or("grammar"),
                message,
            },
            ConstraintErrorWire::TokenEnv(m) => ConstraintError::TokenEnv(m),
            ConstraintErrorWire::Unavailable => ConstraintError::Unavailable,
            ConstraintErrorWire::Matcher(m) => ConstraintError::Matcher(m),
        }
    }
}
