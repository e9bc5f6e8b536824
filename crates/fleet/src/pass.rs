//! [`PassResult`]: what a worker answers to a one-pass job (an embedding or prompt logprobs,
//! [`crate::protocol::JobKind`]), and how the gateway turns it back into what `kestrel serve`'s
//! backend returns, errors included, so that both answer with the same status and message.

use kestrel_engine::prompt_pass::{PromptPassError, PromptTokenScore};
use kestrel_engine::sampling::Logprobs;
use kestrel_server::error::ApiError;
use serde::{Deserialize, Serialize};

/// The outcome of a one-pass job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassResult {
    /// The last prompt token's final hidden state.
    Embedding(Vec<f32>),
    /// Per prompt token, its score (`None` for the first).
    Scores(Vec<Option<TokenScore>>),
    /// Why the pass failed.
    Failed(PassFailure),
}

/// One prompt token's score, as [`PromptTokenScore`] on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenScore {
    pub logprobs: Logprobs,
    pub rank: usize,
}

impl From<PromptTokenScore> for TokenScore {
    fn from(s: PromptTokenScore) -> TokenScore {
        TokenScore {
            logprobs: s.logprobs,
            rank: s.rank,
        }
    }
}

impl From<TokenScore> for PromptTokenScore {
    fn from(s: TokenScore) -> PromptTokenScore {
        PromptTokenScore {
            logprobs: s.logprobs,
            rank: s.rank,
        }
    }
}

/// A failed pass: its class (which decides the HTTP status) and the engine's message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassFailure {
    pub class: FailureClass,
    pub message: String,
}

/// How a pass failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The input is at fault (empty, out of the vocabulary, too long): a 400.
    Input,
    /// No room now (KV cache full, engine stopping): a 503.
    Busy,
    /// The model failed: a 500.
    Model,
}

impl From<PromptPassError> for PassFailure {
    fn from(e: PromptPassError) -> PassFailure {
        let class = match &e {
            PromptPassError::EmptyInput
            | PromptPassError::TokenOutOfVocab { .. }
            | PromptPassError::TooLong { .. } => FailureClass::Input,
            PromptPassError::NoKvSpace { .. } | PromptPassError::Stopped => FailureClass::Busy,
            PromptPassError::Model(_) => FailureClass::Model,
        };
        let message = match e {
            PromptPassError::Model(m) => m,
            other => other.to_string(),
        };
        PassFailure { class, message }
    }
}

impl PassFailure {
    /// The API error `kestrel serve` gives for the same failure; bad input names `param`.
    pub fn into_api_error(self, param: &'static str) -> ApiError {
        match self.class {
            FailureClass::Input => ApiError::param(param, self.message),
            FailureClass::Busy => ApiError::Unavailable(self.message),
            FailureClass::Model => ApiError::Internal(self.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_engine::sampling::TokenLogprob;

    #[test]
    fn failures_keep_their_class_and_message() {
        let cases = [
            (PromptPassError::EmptyInput, FailureClass::Input),
            (
                PromptPassError::TooLong { len: 9, max: 4 },
                FailureClass::Input,
            ),
            (PromptPassError::NoKvSpace { blocks: 3 }, FailureClass::Busy),
            (PromptPassError::Model("nan".into()), FailureClass::Model),
        ];
        for (e, class) in cases {
            let failure = PassFailure::from(e.clone());
            assert_eq!(failure.class, class, "{e}");
            let json = serde_json::to_string(&PassResult::Failed(failure.clone())).unwrap();
            let back: PassResult = serde_json::from_str(&json).unwrap();
            assert_eq!(back, PassResult::Failed(failure));
        }
        let too_long = PassFailure::from(PromptPassError::TooLong { len: 9, max: 4 });
        let error = too_long.into_api_error("input");
        assert_eq!(
            error.to_string(),
            ApiError::param(
                "input",
                PromptPassError::TooLong { len: 9, max: 4 }.to_string()
            )
            .to_string()
        );
    }

    #[test]
    fn scores_round_trip() {
        let score = PromptTokenScore {
            logprobs: Logprobs {
                chosen: TokenLogprob {
                    token: 7,
                    logprob: -1.5,
                },
                top: vec![TokenLogprob {
                    token: 3,
                    logprob: -0.25,
                }],
            },
            rank: 2,
        };
        let result = PassResult::Scores(vec![None, Some(TokenScore::from(score.clone()))]);
        let json = serde_json::to_string(&result).unwrap();
        let PassResult::Scores(back) = serde_json::from_str(&json).unwrap() else {
            panic!("scores come back as scores: {json}");
        };
        assert_eq!(back[0], None);
        assert_eq!(back[1].clone().map(PromptTokenScore::from), Some(score));
    }
}
