//! Tool-call parsing of each model format, whole and streamed, and the forced-call schemas.

use std::path::PathBuf;

use kestrel_server::tools::{
    forced, function_specs, ParsedOutput, StreamEvent, ToolCallFormat, ToolCallStream, ToolChoice,
};
use serde_json::{json, Value};

fn names_args(p: &ParsedOutput) -> Vec<(String, Value)> {
    p.calls
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                serde_json::from_str(&c.arguments).expect("args JSON"),
            )
        })
        .collect()
}

#[test]
fn hermes_calls_and_content() {
    let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}\n</tool_call>";
    let p = ToolCallFormat::Hermes.parse(text);
    assert_eq!(p.content.as_deref(), Some("Let me check.\n"));
    assert_eq!(
        names_args(&p),
        vec![
            ("get_weather".into(), json!({"city": "Paris"})),
            ("add".into(), json!({"a": 1, "b": 2})),
        ]
    );
    assert_ne!(p.calls[0].id, p.calls[1].id, "each call gets its own id");
    assert!(p.calls[0].id.starts_with("chatcmpl-tool-"));
    // Generation may stop at end-of-sequence before the closing tag.
    let open = ToolCallFormat::Hermes.parse("<tool_call>{\"name\": \"f\", \"arguments\": {}}");
    assert_eq!(open.content, None);
    assert_eq!(names_args(&open), vec![("f".into(), json!({}))]);
}

#[test]
fn malformed_calls_stay_text() {
    for (format, text) in [
        (
            ToolCallFormat::Hermes,
            "<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>",
        ),
        (
            ToolCallFormat::Hermes,
            "<tool_call>{\"arguments\": {}}</tool_call>",
        ),
        (
            ToolCallFormat::Llama3Json,
            "{\"name\": \"f\", \"parameters\": {} trailing",
        ),
        (
            ToolCallFormat::Mistral,
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": 3}]",
        ),
        (ToolCallFormat::Mistral, "[TOOL_CALLS]no args here"),
    ] {
        let p = format.parse(text);
        assert!(p.calls.is_empty(), "{format:?}: {text}");
        assert_eq!(p.content.as_deref(), Some(text), "nothing is lost");
    }
    let plain = ToolCallFormat::Hermes.parse("Just text.");
    assert_eq!(plain, ParsedOutput::text("Just text."));
}

#[test]
fn llama3_json_calls() {
    let p = ToolCallFormat::Llama3Json.parse(
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"add\", \"parameters\": {\"a\": 2, \"b\": 3}}",
    );
    assert_eq!(p.content, None);
    assert_eq!(
        names_args(&p),
        vec![
            ("get_weather".into(), json!({"city": "Oslo"})),
            ("add".into(), json!({"a": 2, "b": 3})),
        ]
    );
    let text = ToolCallFormat::Llama3Json.parse("The answer is {42}.");
    assert!(text.calls.is_empty());
}

#[test]
fn mistral_both_layouts() {
    let v3 = ToolCallFormat::Mistral.parse(
        "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 1}}]",
    );
    assert_eq!(v3.calls.len(), 2);
    assert_eq!(
        names_args(&v3)[0],
        ("get_weather".into(), json!({"city": "Rome"}))
    );
    for c in &v3.calls {
        assert_eq!(c.id.len(), 9, "Mistral templates need 9-character ids");
        assert!(c.id.chars().all(|ch| ch.is_ascii_alphanumeric()));
    }
    let v11 = ToolCallFormat::Mistral.parse(
        "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 1}",
    );
    assert_eq!(v11.content.as_deref(), Some("Sure."));
    assert_eq!(
        names_args(&v11),
        vec![
            ("get_weather".into(), json!({"city": "Rome"})),
            ("add".into(), json!({"a": 1, "b": 1})),
        ]
    );
}

#[test]
fn format_follows_the_chat_template() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/chat_templates/tools.json");
    let fx: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture"))
        .expect("fixture JSON");
    let want = [
        ("qwen2.5", ToolCallFormat::Hermes),
        ("qwen3", ToolCallFormat::Hermes),
        ("hermes3", ToolCallFormat::Hermes),
        ("llama3.1", ToolCallFormat::Llama3Json),
        ("mistral-nemo", ToolCallFormat::Mistral),
    ];
    let templates = fx["templates"].as_array().expect("templates");
    for (name, format) in want {
        let t = templates
            .iter()
            .find(|t| t["name"] == name)
            .expect("template in fixture");
        let source = t["template"].as_str().expect("source");
        assert_eq!(ToolCallFormat::detect(source), Some(format), "{name}");
    }
    assert_eq!(ToolCallFormat::detect("{{ messages[0].content }}"), None);
    for f in [
        ToolCallFormat::Hermes,
        ToolCallFormat::Llama3Json,
        ToolCallFormat::Mistral,
    ] {
        assert_eq!(ToolCallFormat::from_name(f.name()), Ok(f));
    }
    assert!(ToolCallFormat::from_name("pythonic").is_err());
}

/// Streams `text` in pieces of `size` characters; returns the content and the calls.
fn stream(format: ToolCallFormat, text: &str, size: usize) -> (String, Vec<(String, Value)>) {
    let chars: Vec<char> = text.chars().collect();
    let mut s = ToolCallStream::new(format);
    let mut events = Vec::new();
    for piece in chars.chunks(size) {
        events.extend(s.push(&piece.iter().collect::<String>()));
    }
    events.extend(s.finish());
    let mut content = String::new();
    let mut calls = Vec::new();
    for (i, e) in events.into_iter().enumerate() {
        match e {
            StreamEvent::Content(c) => content.push_str(&c),
            StreamEvent::Call { index, call } => {
                assert_eq!(index, calls.len(), "call indexes count up (event {i})");
                calls.push((
                    call.name,
                    serde_json::from_str(&call.arguments).expect("args"),
                ));
            }
        }
    }
    (content, calls)
}

#[test]
fn streaming_gives_what_the_whole_parse_gives() {
    let cases = [
        (ToolCallFormat::Hermes, "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"é<\"}}\n</tool_call>"),
        (ToolCallFormat::Hermes, "No tools needed: 3 < 4 and <tool is not a tag."),
        (ToolCallFormat::Hermes, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> trailing words"),
        (ToolCallFormat::Hermes, "<tool_call>{\"broken\": </tool_call>"),
        (ToolCallFormat::Llama3Json, "  {\"name\": \"a\", \"parameters\": {\"k\": [1, 2]}}"),
        (ToolCallFormat::Llama3Json, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}"),
        (ToolCallFormat::Llama3Json, "<|python is not the tag; plain text"),
        (ToolCallFormat::Llama3Json, "Plain answer {with braces}."),
        (ToolCallFormat::Mistral, "Okay [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": 1}}]"),
        (ToolCallFormat::Mistral, "[TOOL_CALLS]a[ARGS]{\"q\": 1}"),
    ];
    for (format, text) in cases {
        let whole = format.parse(text);
        for size in 1..8 {
            let (content, calls) = stream(format, text, size);
            let content = (!content.trim().is_empty()).then_some(content);
            assert_eq!(content, whole.content, "{format:?} {text:?} by {size}");
            assert_eq!(calls, names_args(&whole), "{format:?} {text:?} by {size}");
        }
    }
}

#[test]
fn streaming_holds_back_only_a_possible_marker() {
    let mut s = ToolCallStream::new(ToolCallFormat::Hermes);
    assert_eq!(
        s.push("Hello <tool"),
        vec![StreamEvent::Content("Hello ".into())]
    );
    assert_eq!(
        s.push("box> ok"),
        vec![StreamEvent::Content("<toolbox> ok".into())]
    );
    assert_eq!(s.push("<tool_call>{\"name\""), vec![]);
    let end = s.finish();
    assert_eq!(
        end,
        vec![StreamEvent::Content("<tool_call>{\"name\"".into())]
    );
}

fn weather_tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}),
        json!({"type": "function", "function": {"name": "now"}}),
    ]
}

#[test]
fn tool_choice_is_checked_against_the_tools() {
    let specs = function_specs(&weather_tools()).expect("valid tools");
    assert_eq!(specs[1].parameters, json!({"type": "object"}));
    assert_eq!(ToolChoice::from_request(None, &specs), Ok(ToolChoice::Auto));
    assert_eq!(ToolChoice::from_request(None, &[]), Ok(ToolChoice::None));
    assert_eq!(
        ToolChoice::from_request(Some(&json!("required")), &specs),
        Ok(ToolChoice::Required)
    );
    let named = json!({"type": "function", "function": {"name": "now"}});
    assert_eq!(
        ToolChoice::from_request(Some(&named), &specs),
        Ok(ToolChoice::Named("now".into()))
    );
    let missing = json!({"type": "function", "function": {"name": "nope"}});
    let err = ToolChoice::from_request(Some(&missing), &specs).expect_err("unknown function");
    assert!(err.0.contains("\"nope\""), "{err}");
    assert!(ToolChoice::from_request(Some(&json!("sometimes")), &specs).is_err());
    assert!(ToolChoice::from_request(Some(&json!("required")), &[]).is_err());
    let dup = [weather_tools()[0].clone(), weather_tools()[0].clone()];
    assert!(function_specs(&dup)
        .expect_err("duplicate")
        .0
        .contains("twice"));
    let not_fn = [json!({"type": "retrieval"})];
    assert!(function_specs(&not_fn).is_err());
}

#[test]
fn forced_calls_schema_and_parse() {
    let specs = function_specs(&weather_tools()).expect("valid tools");
    let named = ToolChoice::Named("get_weather".into());
    assert_eq!(
        forced::schema(&named, &specs, true),
        Some(specs[0].parameters.clone())
    );
    let calls = forced::parse(&named, " {\"city\": \"Lima\"} ", ToolCallFormat::Hermes)
        .expect("arguments parse");
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].arguments, "{\"city\":\"Lima\"}");

    let required = forced::schema(&ToolChoice::Required, &specs, false).expect("schema");
    assert_eq!(required["maxItems"], 1);
    assert_eq!(required["items"]["anyOf"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        required["items"]["anyOf"][1]["properties"]["name"]["enum"],
        json!(["now"])
    );
    let text = "[{\"name\": \"now\", \"parameters\": {}}, {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}]";
    let calls =
        forced::parse(&ToolChoice::Required, text, ToolCallFormat::Hermes).expect("calls parse");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].arguments, "{\"city\":\"Oslo\"}");
    assert!(forced::parse(
        &ToolChoice::Required,
        "[{\"name\": \"now\"",
        ToolCallFormat::Hermes
    )
    .is_none());
    assert_eq!(forced::schema(&ToolChoice::Auto, &specs, true), None);
}

#[test]
fn assistant_tool_calls_reach_templates_with_object_arguments() {
    let calls = [json!({"id": "call_1", "type": "function",
        "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}})];
    let v = kestrel_server::tools::template_tool_calls(&calls).expect("valid");
    assert_eq!(v[0]["function"]["arguments"], json!({"a": 1, "b": 2}));
    assert_eq!(v[0]["id"], "call_1");
    let broken = [json!({"function": {"name": "add", "arguments": "{oops"}})];
    let err = kestrel_server::tools::template_tool_calls(&broken).expect_err("bad JSON");
    assert!(
        err.0
            .starts_with("tool_calls[0]: arguments are not valid JSON"),
        "{err}"
    );
    assert!(kestrel_server::tools::template_tool_calls(&[json!({"id": "x"})]).is_err());
}
