//! Whole-output parsers of each [`ToolCallFormat`]: `None` when the text holds no well-formed
//! calls (the caller then keeps it as text).

use serde_json::Value;

use super::call::{non_blank, ParsedOutput, ToolCall};
use super::format::ToolCallFormat;
use crate::harmony::{HarmonyEvent, HarmonyReader};

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const MISTRAL_CALLS: &str = "[TOOL_CALLS]";
const MISTRAL_ARGS: &str = "[ARGS]";

/// `<tool_call>{json}</tool_call>` blocks; the text before the first is content, blank text
/// between blocks is dropped, other text after them is kept as content too. The last block may
/// lack its closing tag (generation stopped at end-of-sequence).
pub(super) fn hermes(text: &str) -> Option<ParsedOutput> {
    let start = text.find(HERMES_OPEN)?;
    let mut content = text[..start].to_string();
    let mut calls = Vec::new();
    let mut rest = &text[start..];
    while let Some(body) = rest.strip_prefix(HERMES_OPEN) {
        let (inner, after) = match body.find(HERMES_CLOSE) {
            Some(end) => (&body[..end], &body[end + HERMES_CLOSE.len()..]),
            None => (body, ""),
        };
        calls.push(call_from_json(inner.trim(), ToolCallFormat::Hermes)?);
        let next = after.trim_start();
        if next.starts_with(HERMES_OPEN) {
            rest = next;
        } else {
            content.push_str(after);
            break;
        }
    }
    Some(ParsedOutput {
        content: non_blank(&content),
        calls,
    })
}

/// One or more JSON objects making up the whole output (after an optional `<|python_tag|>`),
/// separated by `;` or whitespace.
pub(super) fn llama3_json(text: &str) -> Option<ParsedOutput> {
    let t = text.trim_start();
    let t = t.strip_prefix(PYTHON_TAG).unwrap_or(t).trim_start();
    if !t.starts_with('{') {
        return None;
    }
    let values = json_sequence(t)?;
    let calls = values
        .into_iter()
        .map(|v| call_from_value(v, ToolCallFormat::Llama3Json))
        .collect::<Option<Vec<_>>>()?;
    Some(ParsedOutput {
        content: None,
        calls,
    })
}

/// `[TOOL_CALLS]` then a JSON array of calls, or `name[ARGS]{json}` segments each after its
/// own `[TOOL_CALLS]`; the text before the first marker is content.
pub(super) fn mistral(text: &str) -> Option<ParsedOutput> {
    let start = text.find(MISTRAL_CALLS)?;
    let content = non_blank(&text[..start]);
    let rest = text[start + MISTRAL_CALLS.len()..].trim_start();
    let calls = if rest.starts_with('[') {
        let values = json_sequence(rest)?;
        let [Value::Array(items)] = <[Value; 1]>::try_from(values).ok()? else {
            return None;
        };
        items
            .into_iter()
            .map(|v| call_from_value(v, ToolCallFormat::Mistral))
            .collect::<Option<Vec<_>>>()?
    } else {
        rest.split(MISTRAL_CALLS)
            .map(mistral_segment)
            .collect::<Option<Vec<_>>>()?
    };
    Some(ParsedOutput { content, calls })
}

/// A whole harmony reply: its messages to functions are the calls (each body a JSON object),
/// the text of its other messages the content; `None` when it holds no call.
pub(super) fn harmony(text: &str) -> Option<ParsedOutput> {
    let mut reader = HarmonyReader::default();
    let mut events = reader.push(text);
    events.extend(reader.finish());
    let (mut content, mut calls) = (String::new(), Vec::new());
    for e in events {
        match e {
            HarmonyEvent::Reasoning(t) | HarmonyEvent::Content(t) => content.push_str(&t),
            HarmonyEvent::Call { name, arguments } => {
                let args: Value = serde_json::from_str(arguments.trim()).ok()?;
                let id = ToolCallFormat::Harmony.new_call_id();
                calls.push(args.is_object().then(|| ToolCall::new(name, &args, id))?);
            }
        }
    }
    (!calls.is_empty()).then(|| ParsedOutput {
        content: non_blank(&content),
        calls,
    })
}

/// `name[ARGS]{json}`.
fn mistral_segment(segment: &str) -> Option<ToolCall> {
    let (name, args) = segment.split_once(MISTRAL_ARGS)?;
    let name = name.trim();
    let args: Value = serde_json::from_str(args.trim()).ok()?;
    (!name.is_empty() && args.is_object()).then(|| {
        ToolCall::new(
            name.to_string(),
            &args,
            ToolCallFormat::Mistral.new_call_id(),
        )
    })
}

/// The JSON values that make up all of `text`, separated by whitespace or `;`.
fn json_sequence(text: &str) -> Option<Vec<Value>> {
    let mut values = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if rest.is_empty() {
            return Some(values);
        }
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        values.push(stream.next()?.ok()?);
        rest = &rest[stream.byte_offset()..];
    }
}

fn call_from_json(text: &str, format: ToolCallFormat) -> Option<ToolCall> {
    call_from_value(serde_json::from_str(text).ok()?, format)
}

/// `{"name": .., "arguments" | "parameters": {..} or a JSON string of one}`; absent arguments
/// are `{}`.
fn call_from_value(value: Value, format: ToolCallFormat) -> Option<ToolCall> {
    let Value::Object(mut obj) = value else {
        return None;
    };
    let Some(Value::String(name)) = obj.remove("name") else {
        return None;
    };
    let args = obj
        .remove("arguments")
        .or_else(|| obj.remove("parameters"))
        .unwrap_or_else(|| Value::Object(Default::default()));
    let args = match args {
        Value::String(s) => serde_json::from_str(&s).ok()?,
        other => other,
    };
    args.is_object()
        .then(|| ToolCall::new(name, &args, format.new_call_id()))
}
