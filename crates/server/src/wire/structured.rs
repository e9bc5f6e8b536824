//! Structured-output request fields (constrained decoding) and their translation into the
//! engine's [`GrammarSpec`]:
//!
//! * OpenAI `response_format`: `{"type": "text"}`, `{"type": "json_object"}`,
//!   `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`;
//! * vLLM's `guided_json` (a schema object or its JSON text), `guided_regex`, `guided_choice`,
//!   `guided_grammar` (Lark syntax), and `structured_outputs`
//!   (`{"json"} | {"regex"} | {"choice"} | {"grammar"} | {"json_object": true}`);
//! * TGI `parameters.grammar`: `{"type": "json" | "json_schema" | "regex", "value": ...}`.
//!
//! At most one constraint per request; whether it compiles is checked in
//! [`crate::validation`] before the request is queued.

use kestrel_engine::constraint::GrammarSpec;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::openai::wire::{ChatCompletionRequest, CompletionRequest};

/// `response_format` of an OpenAI request.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResponseFormat {
    /// `text` (no constraint), `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Required with `json_schema`.
    pub json_schema: Option<JsonSchemaFormat>,
    /// TGI's chat form: with `json_object` (or `json`), a JSON schema the output must satisfy;
    /// with `regex`, the regular expression (`huggingface_hub` sends this shape).
    #[schema(value_type = Option<Object>)]
    pub value: Option<Value>,
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonSchemaFormat {
    /// Accepted and ignored.
    pub name: Option<String>,
    /// Accepted and ignored.
    pub description: Option<String>,
    /// The JSON schema the output must satisfy.
    #[schema(value_type = Object)]
    pub schema: Option<Value>,
    /// Accepted; the output always follows the schema.
    pub strict: Option<bool>,
}

/// vLLM's `structured_outputs`: exactly one of its fields.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StructuredOutputs {
    /// A JSON schema (object or JSON text).
    #[schema(value_type = Option<Object>)]
    pub json: Option<Value>,
    /// A regular expression the whole output matches.
    pub regex: Option<String>,
    /// The output is exactly one of these strings.
    pub choice: Option<Vec<String>>,
    /// A Lark grammar.
    pub grammar: Option<String>,
    /// Any JSON object.
    pub json_object: Option<bool>,
}

/// The structured-output fields of an OpenAI request, gathered for validation.
#[derive(Debug, Clone, Default)]
pub struct StructuredFields {
    pub response_format: Option<ResponseFormat>,
    pub guided_json: Option<Value>,
    pub guided_regex: Option<String>,
    pub guided_choice: Option<Vec<String>>,
    pub guided_grammar: Option<String>,
    pub structured_outputs: Option<StructuredOutputs>,
}

/// TGI `parameters.grammar`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TgiGrammar {
    /// `json` (value: a JSON schema), `json_schema` (value: `{"name", "schema"}` or a schema)
    /// or `regex` (value: the regular expression).
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(value_type = Object)]
    pub value: Value,
}

/// A constraint and the wire field it came from (the `param` of its errors).
pub type Constraint = (&'static str, GrammarSpec);

impl StructuredFields {
    /// The one constraint these fields ask for, if any; more than one is an error.
    pub fn into_constraint(self) -> Result<Option<Constraint>, ApiError> {
        let mut found: Vec<Constraint> = Vec::new();
        if let Some(format) = self.response_format {
            found.extend(response_format(format)?.map(|g| ("response_format", g)));
        }
        if let Some(schema) = self.guided_json {
            found.push(("guided_json", json_schema("guided_json", schema)?));
        }
        if let Some(pattern) = self.guided_regex {
            found.push(("guided_regex", GrammarSpec::Regex { pattern }));
        }
        if let Some(choices) = self.guided_choice {
            found.push(("guided_choice", GrammarSpec::Choice { choices }));
        }
        if let Some(grammar) = self.guided_grammar {
            found.push(("guided_grammar", GrammarSpec::Lark { grammar }));
        }
        if let Some(outputs) = self.structured_outputs {
            found.push(("structured_outputs", structured_outputs(outputs)?));
        }
        one(found)
    }
}

impl TgiGrammar {
    /// The engine's grammar for a TGI `grammar` parameter.
    pub fn into_spec(self) -> Result<GrammarSpec, ApiError> {
        match self.kind.as_str() {
            "json" => json_schema("grammar", self.value),
            "json_schema" => {
                let schema = match self.value {
                    Value::Object(mut map) if map.contains_key("schema") => {
                        map.remove("schema").unwrap_or(Value::Null)
                    }
                    other => other,
                };
                json_schema("grammar", schema)
            }
            "regex" => match self.value {
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

/// Moves the structured-output fields out of an OpenAI request.
macro_rules! structured_fields {
    ($($ty:ty),*) => {$(
        impl $ty {
            /// Moves the structured-output fields out of the request.
            pub fn structured_fields(&mut self) -> StructuredFields {
                StructuredFields {
                    response_format: self.response_format.take(),
                    guided_json: self.guided_json.take(),
                    guided_regex: self.guided_regex.take(),
                    guided_choice: self.guided_choice.take(),
                    guided_grammar: self.guided_grammar.take(),
                    structured_outputs: self.structured_outputs.take(),
                }
            }
        }
    )*};
}

structured_fields!(CompletionRequest, ChatCompletionRequest);
