//! Interpretation of one SSE payload of an OpenAI-compatible streaming response.
//!
//! Completions chunks carry text in `choices[0].text`; chat chunks in
//! `choices[0].delta.content` (or `reasoning_content` for reasoning models). Both shapes are
//! accepted on either endpoint. With `stream_options.include_usage` the server adds a chunk with
//! a `usage` object (often with empty `choices`); its `prompt_tokens_details.cached_tokens` is
//! how many prompt tokens the server's prefix cache served. `[DONE]` ends the stream; a payload
//! with a top-level `error` object reports a failure in the middle of a stream.

use serde_json::Value;

/// Token counts reported by the server in a `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// `usage.prompt_tokens`, when present.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, when present.
    pub completion_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, when present.
    pub cached_tokens: Option<u64>,
}

/// What one SSE `data` payload means for the measurement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkEvent {
    /// The `[DONE]` sentinel.
    Done,
    /// A JSON chunk: `has_content` is true when it carries non-empty generated text.
    Chunk {
        /// Whether the chunk carries non-empty text (this is what TTFT and ITL are timed on).
        has_content: bool,
        /// The reply text the chunk adds (`text` or `delta.content`; reasoning is left out).
        content: String,
        /// The `usage` object, when the chunk has a non-null one.
        usage: Option<Usage>,
    },
    /// The server reported an error inside the stream, or sent something that is not JSON.
    Error(String),
}

/// Classifies one SSE payload.
pub fn parse_chunk(payload: &str) -> ChunkEvent {
    let payload = payload.trim();
    if payload == "[DONE]" {
        return ChunkEvent::Done;
    }
    let value: Value = match serde_json::from_str(payload) {
        Ok(v) => v,
        Err(e) => return ChunkEvent::Error(format!("invalid JSON chunk ({e}): {}", clip(payload))),
    };
    if let Some(err) = value.get("error").filter(|e| !e.is_null()) {
        return ChunkEvent::Error(format!("error event: {}", clip(&err.to_string())));
    }
    ChunkEvent::Chunk {
        has_content: has_content(&value),
        content: content(&value),
        usage: value.get("usage").and_then(parse_usage),
    }
}

/// The reply text of a chunk: `choices[0].text` or `choices[0].delta.content`, else empty.
fn content(chunk: &Value) -> String {
    let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
        return String::new();
    };
    choice
        .get("text")
        .or_else(|| choice.get("delta").and_then(|d| d.get("content")))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn has_content(chunk: &Value) -> bool {
    let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
        return false;
    };
    let non_empty = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    let delta = choice.get("delta");
    non_empty(choice.get("text"))
        || non_empty(delta.and_then(|d| d.get("content")))
        || non_empty(delta.and_then(|d| d.get("reasoning_content")))
}

fn parse_usage(usage: &Value) -> Option<Usage> {
    if !usage.is_object() {
        return None;
    }
    Some(Usage {
        prompt_tokens: usage.get("prompt_tokens").and_then(Value::as_u64),
        completion_tokens: usage.get("completion_tokens").and_then(Value::as_u64),
        cached_tokens: usage
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64),
    })
}

/// Shortens a server-provided string for error messages.
pub(crate) fn clip(s: &str) -> String {
    const MAX: usize = 300;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(has_content: bool, usage: Option<Usage>) -> ChunkEvent {
        chunk_with(has_content, "", usage)
    }

    fn chunk_with(has_content: bool, content: &str, usage: Option<Usage>) -> ChunkEvent {
        ChunkEvent::Chunk {
            has_content,
            content: content.into(),
            usage,
        }
    }

    #[test]
    fn done_sentinel() {
        assert_eq!(parse_chunk("[DONE]"), ChunkEvent::Done);
        assert_eq!(parse_chunk(" [DONE] "), ChunkEvent::Done);
    }

    #[test]
    fn completions_text() {
        let c = r#"{"id":"x","choices":[{"index":0,"text":" hi","finish_reason":null}]}"#;
        assert_eq!(parse_chunk(c), chunk_with(true, " hi", None));
        let empty = r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":null}"#;
        assert_eq!(parse_chunk(empty), chunk(false, None));
    }

    #[test]
    fn chat_delta_role_only_is_not_content() {
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert_eq!(parse_chunk(role), chunk(false, None));
        let role_null = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#;
        assert_eq!(parse_chunk(role_null), chunk(false, None));
        let text = r#"{"choices":[{"index":0,"delta":{"content":"Hello"}}]}"#;
        assert_eq!(parse_chunk(text), chunk_with(true, "Hello", None));
        let reasoning = r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#;
        assert_eq!(parse_chunk(reasoning), chunk(true, None));
    }

    #[test]
    fn usage_chunk_with_empty_choices() {
        let c = r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":32,"total_tokens":44}}"#;
        let usage = Usage {
            prompt_tokens: Some(12),
            completion_tokens: Some(32),
            cached_tokens: None,
        };
        assert_eq!(parse_chunk(c), chunk(false, Some(usage)));
    }

    #[test]
    fn usage_with_cached_tokens() {
        let c = r#"{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":8,
            "prompt_tokens_details":{"cached_tokens":32}}}"#;
        let usage = Usage {
            prompt_tokens: Some(40),
            completion_tokens: Some(8),
            cached_tokens: Some(32),
        };
        assert_eq!(parse_chunk(c), chunk(false, Some(usage)));
    }

    #[test]
    fn error_object_and_garbage_are_errors() {
        let e = r#"{"error":{"code":500,"message":"boom"}}"#;
        assert!(matches!(parse_chunk(e), ChunkEvent::Error(m) if m.contains("boom")));
        assert!(matches!(parse_chunk("not json"), ChunkEvent::Error(m) if m.contains("not json")));
        assert_eq!(
            parse_chunk(r#"{"error":null,"choices":[]}"#),
            chunk(false, None)
        );
    }

    #[test]
    fn clip_keeps_char_boundaries() {
        let long = "é".repeat(400);
        let c = clip(&long);
        assert!(c.ends_with("...") && c.chars().count() == 303);
        assert_eq!(clip("short"), "short");
    }
}
