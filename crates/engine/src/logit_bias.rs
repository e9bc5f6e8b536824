//! [`LogitBias`]: OpenAI's `logit_bias`, a per-token additive bias applied to the raw logits
//! before penalties, temperature and filters (OpenAI and vLLM order). A bias of -100 in practice
//! bans a token and +100 forces it.

/// Most negative (and, negated, most positive) bias a token may get.
pub const MAX_LOGIT_BIAS: f32 = 100.0;

/// A bias added to the logits of some tokens.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogitBias(Vec<(u32, f32)>);

/// A bias outside `[-100, 100]` or naming no token of the vocabulary.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LogitBiasError {
    #[error("logit_bias values must be between -100 and 100, got {bias} for token {token}")]
    OutOfRange { token: u32, bias: f32 },
    #[error("logit_bias token id {token} is outside the vocabulary (size {vocab})")]
    TokenOutOfVocab { token: u32, vocab: usize },
}

impl LogitBias {
    /// Biases by token id (a later entry for the same id adds to the earlier one).
    pub fn new(entries: Vec<(u32, f32)>) -> Self {
        LogitBias(entries)
    }

    /// The `(token, bias)` entries.
    pub fn entries(&self) -> &[(u32, f32)] {
        &self.0
    }

    /// Whether no token is biased.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks every bias is a number in `[-100, 100]`.
    pub fn validate(&self) -> Result<(), LogitBiasError> {
        match self
            .0
            .iter()
            .find(|(_, b)| !(-MAX_LOGIT_BIAS..=MAX_LOGIT_BIAS).contains(b))
        {
            Some(&(token, bias)) => Err(LogitBiasError::OutOfRange { token, bias }),
            None => Ok(()),
        }
    }

    /// Checks every biased token is below `vocab`.
    pub fn check_vocab(&self, vocab: usize) -> Result<(), LogitBiasError> {
        match self.0.iter().find(|(t, _)| *t as usize >= vocab) {
            Some(&(token, _)) => Err(LogitBiasError::TokenOutOfVocab { token, vocab }),
            None => Ok(()),
        }
    }

    /// Adds the biases to `logits` (ids past its end are skipped).
    pub fn apply(&self, logits: &mut [f32]) {
        for &(token, bias) in &self.0 {
            if let Some(l) = logits.get_mut(token as usize) {
                *l += bias;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_biases_and_checks_ranges() {
        let mut logits = vec![1.0, 2.0, 3.0];
        LogitBias::new(vec![(0, 100.0), (2, -100.0), (7, 5.0)]).apply(&mut logits);
        assert_eq!(logits, vec![101.0, 2.0, -97.0]);
        assert!(LogitBias::new(vec![(1, -100.0), (2, 100.0)])
            .validate()
            .is_ok());
        assert_eq!(
            LogitBias::new(vec![(1, 100.5)]).validate(),
            Err(LogitBiasError::OutOfRange {
                token: 1,
                bias: 100.5
            })
        );
        assert!(LogitBias::new(vec![(1, f32::NAN)]).validate().is_err());
        assert_eq!(
            LogitBias::new(vec![(3, 1.0)]).check_vocab(3),
            Err(LogitBiasError::TokenOutOfVocab { token: 3, vocab: 3 })
        );
    }
}
