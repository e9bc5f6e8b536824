//! [`GrammarSpec`]: the constraint a request's output must satisfy, as the wire formats
//! describe it; compiled by [`super::ConstraintFactory`].

use llguidance::api::TopLevelGrammar;
use serde_json::{json, Value};

use super::ConstraintError;

/// What a constrained request's output must match.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GrammarSpec {
    /// A JSON value valid under `schema` (JSON Schema; the subset `llguidance` supports). A
    /// tool call's arguments are constrained this way too.
    JsonSchema { schema: Value },
    /// Any JSON object.
    JsonObject,
    /// Text matching the regular expression entirely (Rust `regex` syntax).
    Regex { pattern: String },
    /// Exactly one of these strings.
    Choice { choices: Vec<String> },
    /// A context-free grammar in `llguidance`'s Lark dialect (`start: ...` rules, `/regex/`
    /// and `"literal"` terminals).
    Lark { grammar: String },
}

impl GrammarSpec {
    /// The wire name of the constraint's kind (for error messages).
    pub fn kind(&self) -> &'static str {
        match self {
            GrammarSpec::JsonSchema { .. } => "JSON schema",
            GrammarSpec::JsonObject => "JSON object",
            GrammarSpec::Regex { .. } => "regex",
            GrammarSpec::Choice { .. } => "choice",
            GrammarSpec::Lark { .. } => "grammar",
        }
    }

    /// The `llguidance` grammar. JSON is generated compactly (no free whitespace between
    /// tokens) unless the schema sets its own `x-guidance` options.
    pub(crate) fn to_grammar(&self) -> Result<TopLevelGrammar, ConstraintError> {
        let invalid = |message: &str| ConstraintError::Invalid {
            kind: self.kind(),
            message: message.to_owned(),
        };
        Ok(match self {
            GrammarSpec::JsonSchema { schema } => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(invalid("the schema must be a JSON object"));
                }
                TopLevelGrammar::from_json_schema(compact(schema.clone()))
            }
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(compact(json!({"type": "object"})))
            }
            GrammarSpec::Regex { pattern } => {
                regex_syntax::Parser::new()
                    .parse(pattern)
                    .map_err(|e| invalid(&e.to_string()))?;
                TopLevelGrammar::from_regex(pattern)
            }
            GrammarSpec::Choice { choices } => {
                if choices.is_empty() {
                    return Err(invalid("at least one choice is needed"));
                }
                let alternatives: Vec<String> =
                    choices.iter().map(|c| regex_syntax::escape(c)).collect();
                TopLevelGrammar::from_regex(&format!("(?:{})", alternatives.join("|")))
            }
            GrammarSpec::Lark { grammar } => {
                if grammar.trim().is_empty() {
                    return Err(invalid("the grammar is empty"));
                }
                TopLevelGrammar::from_lark(grammar.clone())
            }
        })
    }
}

/// `schema` with whitespace between JSON tokens disallowed, unless it sets `x-guidance`.
fn compact(mut schema: Value) -> Value {
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance")
            .or_insert_with(|| json!({"whitespace_flexible": false}));
    }
    schema
}
