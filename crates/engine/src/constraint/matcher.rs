//! [`ConstraintMatcher`]: one request's grammar state, which tokens it allows next.

use llguidance::Matcher;
use toktrie::SimpleVob;

use super::ConstraintError;

/// A request's position in its grammar. [`ConstraintMatcher::prepare`] computes the next
/// mask (the engine does so while the forward pass runs), [`ConstraintMatcher::apply`] masks
/// a logits row with it, [`ConstraintMatcher::consume`] advances past the sampled token.
pub struct ConstraintMatcher {
    matcher: Matcher,
    /// The mask for the next token, if computed ahead of sampling.
    ready: Option<SimpleVob>,
}

impl std::fmt::Debug for ConstraintMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintMatcher")
            .field("finished", &self.is_finished())
            .field("mask_ready", &self.ready.is_some())
            .finish()
    }
}

impl ConstraintMatcher {
    pub(crate) fn new(matcher: Matcher) -> Self {
        ConstraintMatcher {
            matcher,
            ready: None,
        }
    }

    /// Computes the mask for the next token now (a no-op if it is ready).
    pub fn prepare(&mut self) -> Result<(), ConstraintError> {
        if self.ready.is_none() {
            self.ready = Some(self.mask()?);
        }
        Ok(())
    }

    /// The token ids allowed next (for tests and diagnostics).
    pub fn allowed_tokens(&mut self) -> Result<Vec<u32>, ConstraintError> {
        self.prepare()?;
        Ok(self
            .ready
            .as_ref()
            .map(SimpleVob::to_list)
            .unwrap_or_default())
    }

    /// Sets every disallowed token's logit in `row` to -inf (tokens beyond the grammar's
    /// vocabulary are disallowed too).
    pub fn apply(&mut self, row: &mut [f32]) -> Result<(), ConstraintError> {
        let mask = match self.ready.take() {
            Some(mask) => mask,
            None => self.mask()?,
        };
        let covered = mask.len().min(row.len());
        mask.iter_unset_entries(|i| {
            if i < covered {
                row[i] = f32::NEG_INFINITY;
            }
        });
        row[covered..].fill(f32::NEG_INFINITY);
        Ok(())
    }

    /// Advances past the sampled `token`. After the grammar completed, the end-of-sequence
    /// token that ends the request is not fed to it.
    pub fn consume(&mut self, token: u32) -> Result<(), ConstraintError> {
        self.ready = None;
        if self.matcher.is_stopped() && !self.matcher.is_error() {
            return Ok(());
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| ConstraintError::Matcher(self.error_or(e.to_string())))
    }

    /// Whether the grammar is complete (only end-of-sequence tokens are allowed now).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }

    fn mask(&mut self) -> Result<SimpleVob, ConstraintError> {
        self.matcher
            .compute_mask_or_eos()
            .map_err(|e| ConstraintError::Matcher(self.error_or(e.to_string())))
    }

    fn error_or(&self, fallback: String) -> String {
        self.matcher.get_error().unwrap_or(fallback)
    }
}
