//! The engine core's share of constrained decoding: compiling a request's grammar when it is
//! admitted, and computing the grammar masks of a step while its forward pass runs.
//!
//! ```text
//! engine thread:  lend matchers ─► execute_into (forward pass) ──────────► take them back
//! mask thread:                  └► prepare each matcher's next mask ─┘ (joined)
//! ```
//!
//! Sampling then only applies the ready masks ([`crate::request::Generation::sample`]).

use crate::api::EngineFailure;
use crate::constraint::{ConstraintMatcher, GrammarSpec};
use crate::executor::{BatchOutput, ExecutorError};
use crate::model_failure::ModelFailure;
use crate::request::{Request, RequestId};
use crate::scheduler::SchedulerOutput;

use super::EngineCore;

/// Matchers lent out of their requests for one step.
type Lent = Vec<(RequestId, Box<ConstraintMatcher>)>;

impl EngineCore {
    /// Gives `request` a matcher for its grammar, if it has one.
    pub(super) fn constrain(
        &self,
        request: &mut Request,
        spec: Option<&GrammarSpec>,
    ) -> Result<(), EngineFailure> {
        let Some(spec) = spec else {
            return Ok(());
        };
        let factory = self.constraints.as_ref().ok_or(EngineFailure::Model(
            ModelFailure::StructuredOutputUnavailable,
        ))?;
        let matcher = factory
            .compile(spec)
            .map_err(|e| EngineFailure::Model(ModelFailure::Grammar(e)))?;
        request.generation_mut().0.set_constraint(matcher);
        Ok(())
    }

    /// Runs the forward pass of `out` into `logits`; meanwhile a scoped thread computes the next
    /// mask of every constrained sequence that samples this step.
    pub(super) fn execute_with_masks(
        &mut self,
        out: &SchedulerOutput,
        logits: &mut BatchOutput,
    ) -> Result<(), ExecutorError> {
        let mut lent = self.lend_matchers(out);
        if lent.is_empty() {
            return self.executor.execute_into(&out.batch, logits);
        }
        let executor = &mut self.executor;
        let result = std::thread::scope(|s| {
            let masks = s.spawn(|| {
                for (_, matcher) in lent.iter_mut() {
                    // An error stays in the matcher and fails its request when it samples.
                    let _ = matcher.prepare();
                }
            });
            let result = executor.execute_into(&out.batch, logits);
            if masks.join().is_err() {
                tracing::error!("the grammar mask thread panicked; masks are computed at sampling");
            }
            result
        });
        self.return_matchers(lent);
        result
    }

    fn lend_matchers(&mut self, out: &SchedulerOutput) -> Lent {
        if self.constraints.is_none() {
            return Vec::new();
        }
        out.sampling_request_ids()
            .into_iter()
            .filter_map(|id| {
                let req = self.scheduler.request_mut(id)?;
                Some((id, req.generation_mut().0.take_constraint()?))
            })
            .collect()
    }

    fn return_matchers(&mut self, lent: Lent) {
        for (id, matcher) in lent {
            if let Some(req) = self.scheduler.request_mut(id) {
                req.generation_mut().0.restore_constraint(matcher);
            }
        }
    }
}
