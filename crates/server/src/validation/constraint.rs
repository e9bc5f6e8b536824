//! Structured output in validation: the grammar [`super::structured`] reads from the wire's
//! constraint fields is compiled once against the served model, so that a bad schema, regex or
//! grammar is a 400 naming its field before the request is queued. (The served model's grammar
//! compiler comes from `kestrel_model::engine_builder::constraint_factory`.)

use kestrel_engine::constraint::{ConstraintError, GrammarSpec};

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
