//! Structured output, wire -> engine: the OpenAI fields (`response_format`, vLLM's `guided_*`
//! and `structured_outputs`) and TGI's `grammar` parameter become one engine [`GrammarSpec`],
//! with a 400 naming the field when they are malformed or more than one constraint is given.
//! Whether the grammar compiles is [`super::constraint`]'s check.

use kestrel_engine::constraint::GrammarSpec;
use serde_json::Value;

use crate::error::ApiError;
use crate::wire::structured::{ResponseFormat, StructuredFields, StructuredOutputs, TgiGrammar};

/// A constraint and the wire field it came from (the `param` of its errors).
pub type Constraint = (&'static str, GrammarSpec);

/// The one constraint an OpenAI request's structured-output fields ask for, if any; more than
/// one is an error.
pub fn constraint(fields: StructuredFields) -> Result<Option<Constraint>, ApiError> {
    let mut found: Vec<Constraint> = Vec::new();
    if let Some(format) = fields.response_format {
        found.extend(response_format(format)?.map(|g| ("response_format", g)));
    }
    if let Some(schema) = fields.guided_json {
        found.push(("guided_json", json_schema("guided_json", schema)?));
    }
    if let Some(pattern) = fields.guided_regex {
        found.push(("guided_regex", GrammarSpec::Regex { pattern }));
    }
    if let Some(choices) = fields.guided_choice {
        found.push(("guided_choice", GrammarSpec::Choice { choices }));
    }
    if let Some(grammar) = fields.guided_grammar {
        found.push(("guided_grammar", GrammarSpec::Lark { grammar }));
    }
    if let Some(outputs) = fields.structured_outputs {
        found.push(("structured_outputs", structured_outputs(outputs)?));
    }
    one(found)
}

/// The engine's grammar for a TGI `grammar` parameter.
pub fn tgi_grammar(grammar: TgiGrammar) -> Result<GrammarSpec, ApiError> {
    match grammar.kind.as_str() {
        "json" => json_schema("grammar", grammar.value),
        "json_schema" => {
            let schema = match grammar.value {
                Value::Object(mut map) if map.contains_key("schema") => {
                    map.remove("schema").unwrap_or(Value::Null)
                }
                other => other,
            };
            json_schema("grammar", schema)
        }
        "regex" => match grammar.value {
            Value::String(pattern) => Ok(GrammarSpec::Regex { pattern }),
            _ => Err(ApiError::param(
                "grammar",
                "a regex grammar's value must be a string",
            )),
        },
        other => Err(ApiError::param(
            "grammar",
            format!("grammar type {other:?} is not supported (json, json_schema or regex)"),
        )),
    }
}

/// At most one constraint.
fn one(mut found: Vec<Constraint>) -> Result<Option<Constraint>, ApiError> {
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|(p, _)| *p).collect();
        return Err(ApiError::param(
            found[1].0,
            format!(
                "only one structured-output constraint may be given per request, got {}",
                names.join(", ")
            ),
        ));
    }
    Ok(found.pop())
}

fn response_format(format: ResponseFormat) -> Result<Option<GrammarSpec>, ApiError> {
    const P: &str = "response_format";
    match format.kind.as_str() {
        "text" => Ok(None),
        "json_object" | "json" => match format.value {
            None if format.kind == "json_object" => Ok(Some(GrammarSpec::JsonObject)),
            None => Err(ApiError::param(
                P,
                "a json response_format needs a value (a schema)",
            )),
            Some(schema) => json_schema(P, schema).map(Some),
        },
        "regex" => match format.value {
            Some(Value::String(pattern)) => Ok(Some(GrammarSpec::Regex { pattern })),
            _ => Err(ApiError::param(
                P,
                "a regex response_format's value must be a string",
            )),
        },
        "json_schema" => {
            let schema = format
                .json_schema
                .and_then(|f| f.schema)
                .ok_or_else(|| ApiError::param(P, "json_schema.schema is required"))?;
            json_schema(P, schema).map(Some)
        }
        other => Err(ApiError::param(
            P,
            format!(
                "response_format type {other:?} is not supported \
                 (text, json_object, json_schema, or TGI's json and regex with a value)"
            ),
        )),
    }
}

fn structured_outputs(o: StructuredOutputs) -> Result<GrammarSpec, ApiError> {
    const P: &str = "structured_outputs";
    let mut found: Vec<Constraint> = Vec::new();
    if let Some(schema) = o.json {
        found.push((P, json_schema(P, schema)?));
    }
    if let Some(pattern) = o.regex {
        found.push((P, GrammarSpec::Regex { pattern }));
    }
    if let Some(choices) = o.choice {
        found.push((P, GrammarSpec::Choice { choices }));
    }
    if let Some(grammar) = o.grammar {
        found.push((P, GrammarSpec::Lark { grammar }));
    }
    if o.json_object == Some(true) {
        found.push((P, GrammarSpec::JsonObject));
    }
    one(found)?.map(|(_, g)| g).ok_or_else(|| {
        ApiError::param(
            P,
            "structured_outputs needs one of json, regex, choice, grammar or json_object",
        )
    })
}

/// A JSON schema given as an object (or `true`) or as its JSON text.
fn json_schema(param: &'static str, schema: Value) -> Result<GrammarSpec, ApiError> {
    let schema = match schema {
        Value::String(text) => serde_json::from_str(&text).map_err(|e| {
            ApiError::param(param, format!("the JSON schema is not valid JSON: {e}"))
        })?,
        other => other,
    };
    if !(schema.is_object() || schema.is_boolean()) {
        return Err(ApiError::param(
            param,
            "the JSON schema must be a JSON object",
        ));
    }
    Ok(GrammarSpec::JsonSchema { schema })
}
