//! Structured output in validation: the grammar [`super::structured`] reads from the wire's
//! constraint fields is compiled once against the served model, so that a bad schema, regex or
//! grammar is a 400 naming its field before the request is queued; and [`factory`], the served
//! model's grammar compiler.

use std::sync::Arc;

use kestrel_engine::constraint::{ConstraintError, ConstraintFactory, GrammarSpec};
use kestrel_model::tokenizer::Tokenizer;

use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::structured::{StructuredFields, TgiGrammar};

use super::structured::{self, Constraint};

/// The grammar an OpenAI request's structured-output fields ask for, checked.
pub fn checked(
    state: &AppState,
    fields: StructuredFields,
) -> Result<Option<GrammarSpec>, ApiError> {
    structured::constraint(fields)?
        .map(|c| compiled(state, c))
        .transpose()
}

/// The grammar of a TGI request's `grammar` parameter, checked.
pub fn checked_tgi(
    state: &AppState,
    grammar: Option<TgiGrammar>,
) -> Result<Option<GrammarSpec>, ApiError> {
    grammar
        .map(|g| compiled(state, ("grammar", structured::tgi_grammar(g)?)))
        .transpose()
}

pub(crate) fn compiled(
    state: &AppState,
    (param, spec): Constraint,
) -> Result<GrammarSpec, ApiError> {
    state
        .backend()
        .validate_grammar(&spec)
        .map_err(|e: ConstraintError| ApiError::param(param, e.to_string()))?;
    Ok(spec)
}

/// The grammar compiler for the served model (its logits are `logits_width` wide); `None`,
/// with a warning, if its vocabulary cannot be turned into one (structured output is then
/// refused with a 400).
pub fn factory(tokenizer: &Tokenizer, logits_width: usize) -> Option<Arc<ConstraintFactory>> {
    match tokenizer.constraint_factory(logits_width) {
        Ok(factory) => Some(factory),
        Err(e) => {
            tracing::warn!(error = %e, "structured output is disabled");
            None
        }
    }
}
