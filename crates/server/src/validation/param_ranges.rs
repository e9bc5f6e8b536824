//! The numeric ranges and size limits of request parameters, in one table that both
//! [`crate::validation`] (which refuses a value outside them, naming the parameter) and the
//! OpenAPI document ([`crate::routes::openapi::document`], as JSON Schema `minimum`,
//! `exclusiveMinimum`, `maximum`, `maxItems`, `minLength`, `maxLength`) read, so the two cannot
//! disagree.
//!
//! The `priority` range depends on the server's `--min-client-priority`, so the served document
//! is made for it ([`documented`] and [`annotate`] take it). Limits that depend on the model
//! (`max_tokens` beyond what fits the context, token ids below the vocabulary size) are checked
//! by validation and documented only by their static part.

use std::fmt;

use kestrel_engine::sampling::MAX_LOGPROBS;
use serde_json::{Map, Number, Value};

use crate::state::{MAX_N, MAX_STOP_BYTES, MAX_STOP_SEQUENCES};
use crate::validation::ttft_slo::MAX_TTFT_SLO_MS;
use crate::validation::MAX_CANDIDATES;

/// The values a numeric parameter may take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Lowest value (`None`: unbounded).
    pub min: Option<f64>,
    /// Whether `min` itself is outside the range.
    pub min_exclusive: bool,
    /// Highest value, inclusive (`None`: unbounded).
    pub max: Option<f64>,
}

impl Range {
    /// `lo ..= hi`.
    pub const fn closed(lo: f64, hi: f64) -> Range {
        Range {
            min: Some(lo),
            min_exclusive: false,
            max: Some(hi),
        }
    }

    /// `lo <` value `<= hi`.
    pub const fn open_closed(lo: f64, hi: f64) -> Range {
        Range {
            min: Some(lo),
            min_exclusive: true,
            max: Some(hi),
        }
    }

    /// At least `lo`.
    pub const fn at_least(lo: f64) -> Range {
        Range {
            min: Some(lo),
            min_exclusive: false,
            max: None,
        }
    }

    /// More than `lo`.
    pub const fn above(lo: f64) -> Range {
        Range {
            min: Some(lo),
            min_exclusive: true,
            max: None,
        }
    }

    /// At most `hi`.
    pub const fn at_most(hi: f64) -> Range {
        Range {
            min: None,
            min_exclusive: false,
            max: Some(hi),
        }
    }

    /// Whether `v` is in the range (never for a non-finite `v`).
    pub fn contains(&self, v: f64) -> bool {
        let above_min = match self.min {
            None => true,
            Some(lo) if self.min_exclusive => v > lo,
            Some(lo) => v >= lo,
        };
        v.is_finite() && above_min && self.max.is_none_or(|hi| v <= hi)
    }

    /// Whether integer `v` is in the range.
    pub fn contains_int(&self, v: i64) -> bool {
        self.contains(v as f64)
    }

    /// The JSON Schema keywords of the range, added to `schema`.
    fn annotate(&self, schema: &mut Map<String, Value>) {
        if let Some(lo) = self.min {
            let key = if self.min_exclusive {
                "exclusiveMinimum"
            } else {
                "minimum"
            };
            schema.insert(key.into(), number(lo));
        }
        if let Some(hi) = self.max {
            schema.insert("maximum".into(), number(hi));
        }
    }
}

impl fmt::Display for Range {
    /// As validation's messages say it: "between 0 and 2", "in (0, 1]", "at least 1", "> 0".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.min, self.min_exclusive, self.max) {
            (Some(lo), false, Some(hi)) => write!(f, "between {lo} and {hi}"),
            (Some(lo), true, Some(hi)) => write!(f, "in ({lo}, {hi}]"),
            (Some(lo), false, None) => write!(f, "at least {lo}"),
            (Some(lo), true, None) => write!(f, "> {lo}"),
            (None, _, Some(hi)) => write!(f, "at most {hi}"),
            (None, _, None) => write!(f, "a finite number"),
        }
    }
}

/// A bound as a JSON number: an integer when it is one (so integer parameters get integer
/// bounds).
fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        Value::Number(Number::from(v as i64))
    } else {
        Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

/// OpenAI `temperature`.
pub const TEMPERATURE: Range = Range::closed(0.0, 2.0);
/// TGI `temperature` (greedy is `do_sample: false`, not 0).
pub const TGI_TEMPERATURE: Range = Range::above(0.0);
pub const TOP_P: Range = Range::open_closed(0.0, 1.0);
pub const MIN_P: Range = Range::closed(0.0, 1.0);
/// `-1` and `0` disable top-k.
pub const TOP_K: Range = Range::at_least(-1.0);
pub const REPETITION_PENALTY: Range = Range::above(0.0);
/// `presence_penalty` and `frequency_penalty`.
pub const PENALTY: Range = Range::closed(-2.0, 2.0);
/// Choices per prompt.
pub const N: Range = Range::closed(1.0, MAX_N as f64);
/// Candidates per prompt (also at least `n`).
pub const BEST_OF: Range = Range::closed(1.0, MAX_CANDIDATES as f64);
/// `logprobs`, `top_logprobs`, `prompt_logprobs`, `top_n_tokens`: alternatives per token.
pub const LOGPROBS: Range = Range::closed(0.0, MAX_LOGPROBS as f64);
/// `max_tokens` and the like (the context bounds it further).
pub const MAX_TOKENS: Range = Range::at_least(1.0);
pub const MIN_TOKENS: Range = Range::closed(0.0, u32::MAX as f64);
pub const TTFT_SLO_MS: Range = Range::closed(1.0, MAX_TTFT_SLO_MS as f64);
/// `priority`: from the server's `--min-client-priority` to `i32::MAX`.
pub fn priority(min_client_priority: i32) -> Range {
    Range::closed(f64::from(min_client_priority), f64::from(i32::MAX))
}
/// Fewest chat messages.
pub const MIN_MESSAGES: usize = 1;
/// A token id (the vocabulary bounds it further).
pub const TOKEN_ID: Range = Range::at_least(0.0);
/// TGI's `best_of`: only 1.
pub const TGI_BEST_OF: Range = Range::closed(1.0, 1.0);
/// TGI's `typical_p`: only 1 (no typical sampling).
pub const TGI_TYPICAL_P: Range = Range::closed(1.0, 1.0);

/// Where a range applies in the document.
#[derive(Debug, Clone, Copy)]
pub struct Documented {
    /// The component schema (a request body type).
    pub schema: &'static str,
    pub property: &'static str,
    /// Whether the range is of the property's array items.
    pub items: bool,
    pub range: Range,
}

const fn field(schema: &'static str, property: &'static str, range: Range) -> Documented {
    Documented {
        schema,
        property,
        items: false,
        range,
    }
}

const fn items(schema: &'static str, property: &'static str, range: Range) -> Documented {
    Documented {
        schema,
        property,
        items: true,
        range,
    }
}

/// The sampling fields both OpenAI request types share.
macro_rules! openai_shared {
    ($schema:literal) => {
        [
            field($schema, "temperature", TEMPERATURE),
            field($schema, "top_p", TOP_P),
            field($schema, "n", N),
            field($schema, "presence_penalty", PENALTY),
            field($schema, "frequency_penalty", PENALTY),
            field($schema, "top_k", TOP_K),
            field($schema, "min_p", MIN_P),
            field($schema, "repetition_penalty", REPETITION_PENALTY),
            field($schema, "min_tokens", MIN_TOKENS),
            field($schema, "ttft_slo_ms", TTFT_SLO_MS),
            field($schema, "max_tokens", MAX_TOKENS),
            field($schema, "prompt_logprobs", LOGPROBS),
            items($schema, "stop_token_ids", TOKEN_ID),
        ]
    };
}

const COMPLETION_SHARED: [Documented; 13] = openai_shared!("CompletionRequest");
const CHAT_SHARED: [Documented; 13] = openai_shared!("ChatCompletionRequest");

const OWN: [Documented; 15] = [
    field("CompletionRequest", "logprobs", LOGPROBS),
    field("CompletionRequest", "best_of", BEST_OF),
    field("ChatCompletionRequest", "max_completion_tokens", MAX_TOKENS),
    field("ChatCompletionRequest", "top_logprobs", LOGPROBS),
    field("GenerateParameters", "max_new_tokens", MAX_TOKENS),
    field("GenerateParameters", "temperature", TGI_TEMPERATURE),
    field("GenerateParameters", "top_k", TOP_K),
    field("GenerateParameters", "top_p", TOP_P),
    field("GenerateParameters", "min_p", MIN_P),
    field(
        "GenerateParameters",
        "repetition_penalty",
        REPETITION_PENALTY,
    ),
    field("GenerateParameters", "frequency_penalty", PENALTY),
    field("GenerateParameters", "top_n_tokens", LOGPROBS),
    field("GenerateParameters", "best_of", TGI_BEST_OF),
    field("GenerateParameters", "typical_p", TGI_TYPICAL_P),
    field("GenerateParameters", "ttft_slo_ms", TTFT_SLO_MS),
];

/// Anthropic's Messages.
const MESSAGES: [Documented; 4] = [
    field("MessagesRequest", "temperature", TEMPERATURE),
    field("MessagesRequest", "top_p", TOP_P),
    field("MessagesRequest", "top_k", TOP_K),
    field("MessagesRequest", "max_tokens", MAX_TOKENS),
];

/// Every documented numeric range, for a server whose `--min-client-priority` is
/// `min_client_priority`.
pub fn documented(min_client_priority: i32) -> Vec<Documented> {
    let priority = [
        "CompletionRequest",
        "ChatCompletionRequest",
        "GenerateParameters",
    ]
    .map(|schema| field(schema, "priority", self::priority(min_client_priority)));
    COMPLETION_SHARED
        .iter()
        .chain(&CHAT_SHARED)
        .chain(&OWN)
        .chain(&MESSAGES)
        .chain(&priority)
        .copied()
        .collect()
}

/// Adds the ranges (for `min_client_priority`), the stop-sequence limits and the fewest chat
/// messages to the OpenAPI document `doc`. Returns the entries it found no schema property for
/// (none, unless a wire type was renamed).
pub fn annotate(doc: &mut Value, min_client_priority: i32) -> Vec<String> {
    let mut missing = Vec::new();
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return vec!["components.schemas".into()];
    };
    for d in documented(min_client_priority) {
        let property = schemas
            .get_mut(d.schema)
            .and_then(|s| s.pointer_mut(&format!("/properties/{}", d.property)));
        let target = match property {
            Some(p) if d.items => p.get_mut("items"),
            p => p,
        };
        match target.and_then(Value::as_object_mut) {
            Some(schema) => d.range.annotate(schema),
            None => missing.push(format!("{}.{}", d.schema, d.property)),
        }
    }
    if !annotate_stops(schemas) {
        missing.push("StopSequences".into());
    }
    match schemas
        .get_mut("ChatCompletionRequest")
        .and_then(|s| s.pointer_mut("/properties/messages"))
        .and_then(Value::as_object_mut)
    {
        Some(messages) => {
            messages.insert("minItems".into(), Value::from(MIN_MESSAGES));
        }
        None => missing.push("ChatCompletionRequest.messages".into()),
    }
    missing
}

/// `stop`: one string or at most [`MAX_STOP_SEQUENCES`], each 1 to [`MAX_STOP_BYTES`] long.
fn annotate_stops(schemas: &mut Map<String, Value>) -> bool {
    let Some(variants) = schemas
        .get_mut("StopSequences")
        .and_then(|s| s.get_mut("oneOf"))
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let text = |s: &mut Map<String, Value>| {
        s.insert("minLength".into(), Value::from(1));
        s.insert("maxLength".into(), Value::from(MAX_STOP_BYTES));
    };
    let mut found = 0;
    for v in variants.iter_mut().filter_map(Value::as_object_mut) {
        match v.get("type").and_then(Value::as_str) {
            Some("string") => text(v),
            Some("array") => {
                v.insert("maxItems".into(), Value::from(MAX_STOP_SEQUENCES));
                match v.get_mut("items").and_then(Value::as_object_mut) {
                    Some(item) => text(item),
                    None => continue,
                }
            }
            _ => continue,
        }
        found += 1;
    }
    found == 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_include_and_exclude_their_bounds() {
        assert!(TEMPERATURE.contains(0.0) && TEMPERATURE.contains(2.0));
        assert!(!TEMPERATURE.contains(2.01) && !TEMPERATURE.contains(-0.01));
        assert!(!TOP_P.contains(0.0) && TOP_P.contains(1e-6) && TOP_P.contains(1.0));
        assert!(!REPETITION_PENALTY.contains(f64::INFINITY));
        assert!(!TEMPERATURE.contains(f64::NAN));
        assert!(priority(-10).contains_int(-10) && !priority(-10).contains_int(-11));
        assert!(!priority(0).contains_int(i64::from(i32::MAX) + 1));
        assert_eq!(TEMPERATURE.to_string(), "between 0 and 2");
        assert_eq!(TOP_P.to_string(), "in (0, 1]");
    }

    #[test]
    fn integer_bounds_are_json_integers() {
        assert_eq!(number(16.0), serde_json::json!(16));
        assert_eq!(number(0.5), serde_json::json!(0.5));
        assert_eq!(number(u32::MAX as f64), serde_json::json!(u32::MAX));
    }
}
