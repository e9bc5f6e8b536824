//! [`ConstraintFactory`]: compiles [`GrammarSpec`]s against one model's vocabulary.

use llguidance::{Matcher, ParserFactory};
use toktrie::TokEnv;

use super::{ConstraintError, ConstraintMatcher, GrammarSpec};

/// Built once per model from its token environment; shared (`Arc`) by the server, which
/// validates grammars before queueing, and the engine, which compiles one matcher per request.
pub struct ConstraintFactory {
    factory: ParserFactory,
}

impl std::fmt::Debug for ConstraintFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintFactory")
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl ConstraintFactory {
    /// A factory over `env` (its end-of-sequence tokens are the ones allowed once a grammar is
    /// complete).
    pub fn new(env: &TokEnv) -> Result<Self, ConstraintError> {
        let mut factory =
            ParserFactory::new_simple(env).map_err(|e| ConstraintError::TokenEnv(e.to_string()))?;
        factory.quiet();
        Ok(ConstraintFactory { factory })
    }

    /// Tokens the masks cover.
    pub fn vocab_size(&self) -> usize {
        self.factory.tok_env().tok_trie().vocab_size()
    }

    /// A fresh matcher for `spec`, or why `spec` does not compile.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<ConstraintMatcher, ConstraintError> {
        let invalid = |message: String| ConstraintError::Invalid {
            kind: spec.kind(),
            message,
        };
        let parser = self
            .factory
            .create_parser(spec.to_grammar()?)
            .map_err(|e| invalid(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(message) => Err(invalid(message)),
            None => Ok(ConstraintMatcher::new(matcher)),
        }
    }

    /// Checks that `spec` compiles (what the server calls before queueing a request).
    pub fn validate(&self, spec: &GrammarSpec) -> Result<(), ConstraintError> {
        self.compile(spec).map(drop)
    }
}
