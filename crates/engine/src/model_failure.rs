//! [`ModelFailure`]: the typed cause of [`crate::api::EngineFailure::Model`], the ways the
//! model step can fail a request (the forward pass, its output, sampling, structured output).
//! It travels with the failure (over the fleet queue too), so callers can match on the cause
//! and render it.

use crate::constraint::ConstraintError;
use crate::executor::ExecutorError;
use crate::sampling::SampleError;

/// Why the model step failed a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ModelFailure {
    /// The executor's forward pass failed.
    #[error(transparent)]
    Forward(#[from] ExecutorError),
    /// The executor returned a different number of logits rows than the batch asked for.
    #[error("executor returned {returned} logits rows for {wanted} rows wanted")]
    LogitsRows {
        /// Rows returned.
        returned: usize,
        /// Rows the batch asked for.
        wanted: usize,
    },
    /// A logits row could not be sampled from.
    #[error("sampling failed: {0}")]
    Sampling(#[from] SampleError),
    /// The request asks for structured output, which this engine was started without.
    #[error("structured output is not available on this engine")]
    StructuredOutputUnavailable,
    /// The request's grammar does not compile.
    #[error("structured output: {0}")]
    Grammar(ConstraintError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_render_as_the_model_failure_messages() {
        let forward = ModelFailure::from(ExecutorError::Failed("oom".into()));
        assert_eq!(forward.to_string(), "model execution failed: oom");
        let rows = ModelFailure::LogitsRows {
            returned: 1,
            wanted: 2,
        };
        assert_eq!(
            rows.to_string(),
            "executor returned 1 logits rows for 2 rows wanted"
        );
        let sampling = ModelFailure::from(SampleError::EmptyLogits);
        assert_eq!(sampling.to_string(), "sampling failed: logits row is empty");
    }

    #[test]
    fn a_cause_survives_the_wire() {
        let grammar = ModelFailure::Grammar(ConstraintError::Invalid {
            kind: "regex",
            message: "unbalanced".into(),
        });
        let json = serde_json::to_string(&grammar).unwrap();
        let back: ModelFailure = serde_json::from_str(&json).unwrap();
        assert_eq!(back, grammar);
        assert_eq!(
            back.to_string(),
            "structured output: invalid regex: unbalanced"
        );
    }
}
