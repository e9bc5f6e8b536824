//! Constrained decoding (structured output): a request may carry a [`GrammarSpec`] (a JSON
//! schema, any JSON object, a regular expression, a list of choices or a Lark grammar); the
//! engine then lets it sample only tokens that keep its output inside the grammar.
//!
//! ```text
//! GrammarSpec ─► ConstraintFactory::compile (once per request, on the server before queueing
//!                to report errors, and again when the engine admits the request)
//!             ─► ConstraintMatcher: per step, the mask of allowed tokens (computed while the
//!                forward pass runs, see `core`), disallowed logits set to -inf before the
//!                sampler; the sampled token advances the matcher; once the grammar is complete
//!                only end-of-sequence tokens are allowed.
//! ```
//!
//! The grammar engine is `llguidance`; [`ConstraintFactory`] is built once per model from a
//! [`toktrie::TokEnv`] (the model crate builds one from its tokenizer).

mod error;
mod factory;
mod grammar_spec;
mod matcher;

pub use error::ConstraintError;
pub use factory::ConstraintFactory;
pub use grammar_spec::GrammarSpec;
pub use matcher::ConstraintMatcher;
pub use toktrie::TokEnv;
