//! [`GenerationDefaults`]: sampling values for requests that leave them out
//! (`--override-generation-config`, vLLM's flag): an operator can make a model greedy, or cap
//! the tokens of requests that set no limit, without touching the clients (agents such as
//! Claude Code and Codex send no temperature and often no output limit).

use serde::{Deserialize, Serialize};

use crate::openai::wire::SamplingFields;
use crate::validation::param_ranges as ranges;

/// Defaults for the sampling fields a request does not set. Every field is optional; an
/// empty object (`{}`) changes nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationDefaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    /// Output tokens of a request that sets no limit (still within the context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
}

impl GenerationDefaults {
    /// Reads the flag's JSON object, each value checked against the range requests are held
    /// to; the error names the key.
    pub fn parse(json: &str) -> Result<GenerationDefaults, String> {
        let not_object = |e: &dyn std::fmt::Display| {
            format!(
                "not a JSON object of temperature, top_p, top_k, min_p, repetition_penalty, \
                 max_new_tokens: {e}"
            )
        };
        // Only an object: serde would also read a struct from an array of its fields.
        let value: serde_json::Value = serde_json::from_str(json).map_err(|e| not_object(&e))?;
        if !value.is_object() {
            return Err(not_object(&"an object is required"));
        }
        let d: GenerationDefaults = serde_json::from_value(value).map_err(|e| not_object(&e))?;
        let check = |name: &str, v: Option<f64>, range: ranges::Range| match v {
            Some(x) if !range.contains(x) => Err(format!("{name} must be {range}, got {x}")),
            _ => Ok(()),
        };
        check("temperature", d.temperature, ranges::TEMPERATURE)?;
        check("top_p", d.top_p, ranges::TOP_P)?;
        check("min_p", d.min_p, ranges::MIN_P)?;
        check(
            "repetition_penalty",
            d.repetition_penalty,
            ranges::REPETITION_PENALTY,
        )?;
        if d.max_new_tokens == Some(0) {
            return Err("max_new_tokens must be at least 1".into());
        }
        Ok(d)
    }

    /// `f` with the fields it leaves out taken from these defaults.
    pub(crate) fn fill(&self, mut f: SamplingFields) -> SamplingFields {
        f.temperature = f.temperature.or(self.temperature);
        f.top_p = f.top_p.or(self.top_p);
        f.top_k = f.top_k.or(self.top_k);
        f.min_p = f.min_p.or(self.min_p);
        f.repetition_penalty = f.repetition_penalty.or(self.repetition_penalty);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_and_named() {
        let ok = GenerationDefaults::parse(r#"{"temperature": 0, "max_new_tokens": 64}"#).unwrap();
        assert_eq!((ok.temperature, ok.max_new_tokens), (Some(0.0), Some(64)));
        assert_eq!(
            GenerationDefaults::parse("{}").unwrap(),
            GenerationDefaults::default()
        );
        for (bad, names) in [
            (r#"{"temperature": 3}"#, "temperature"),
            (r#"{"top_p": 0}"#, "top_p"),
            (r#"{"max_new_tokens": 0}"#, "max_new_tokens"),
            (r#"{"seed": 1}"#, "seed"),
            ("[1]", "JSON object"),
        ] {
            let err = GenerationDefaults::parse(bad).unwrap_err();
            assert!(err.contains(names), "{bad}: {err}");
        }
    }

    #[test]
    fn a_request_s_own_values_win() {
        let d = GenerationDefaults::parse(r#"{"temperature": 0, "top_k": 5}"#).unwrap();
        let own = SamplingFields {
            temperature: Some(0.7),
            ..SamplingFields::default()
        };
        let f = d.fill(own);
        assert_eq!((f.temperature, f.top_k), (Some(0.7), Some(5)));
    }
}
