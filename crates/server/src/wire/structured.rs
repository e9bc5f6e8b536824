//! Structured-output request fields (constrained decoding), data only:
//!
//! * OpenAI `response_format`: `{"type": "text"}`, `{"type": "json_object"}`,
//!   `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`;
//! * vLLM's `guided_json` (a schema object or its JSON text), `guided_regex`, `guided_choice`,
//!   `guided_grammar` (Lark syntax), and `structured_outputs`
//!   (`{"json"} | {"regex"} | {"choice"} | {"grammar"} | {"json_object": true}`);
//! * TGI `parameters.grammar`: `{"type": "json" | "json_schema" | "regex", "value": ...}`.
//!
//! [`crate::validation::structured`] turns them into the engine's grammar (at most one
//! constraint per request) and [`crate::validation::constraint`] checks that it compiles before
//! the request is queued.

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

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

/// The one list of the OpenAI requests' structured-output fields: calls
/// `$callback! { $($args)* ; <fields> }`, each field with its documentation and schema
/// attributes. It declares [`StructuredFields`] here and the same fields of each OpenAI request
/// (see `crate::openai::wire`'s `openai_request!`).
macro_rules! structured_fields {
    ($callback:ident! { $($args:tt)* }) => {
        $callback! { $($args)* ;
            /// Structured output: `text`, `json_object` or `json_schema`.
            response_format: Option<$crate::wire::structured::ResponseFormat>,
            /// Structured output (vLLM): a JSON schema (object or JSON text).
            #[schema(value_type = Option<Object>)]
            guided_json: Option<serde_json::Value>,
            /// Structured output (vLLM): a regular expression the whole output matches.
            guided_regex: Option<String>,
            /// Structured output (vLLM): the output is one of these strings.
            guided_choice: Option<Vec<String>>,
            /// Structured output (vLLM): a grammar in llguidance's Lark syntax.
            guided_grammar: Option<String>,
            /// Structured output (vLLM): one of `json`, `regex`, `choice`, `grammar`, `json_object`.
            structured_outputs: Option<$crate::wire::structured::StructuredOutputs>,
        }
    };
}
pub(crate) use structured_fields;

/// Declares [`StructuredFields`] from the field list.
macro_rules! structured_fields_struct {
    ($(#[$meta:meta])* ; $( $(#[$field_meta:meta])* $field:ident : $ty:ty, )*) => {
        $(#[$meta])*
        pub struct StructuredFields {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }
    };
}

structured_fields! { structured_fields_struct! {
    /// The structured-output fields of an OpenAI request, as each request type's
    /// `structured_fields()` moves them out for validation.
    #[derive(Debug, Clone, Default, ToSchema)]
} }

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
