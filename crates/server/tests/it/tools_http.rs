//! Tool calling over HTTP on the real default model (`KESTREL_DEFAULT_MODEL`): forced calls
//! (`required`, a named function) always carry arguments that satisfy their schemas, whole and
//! streamed; under `auto` the model's own format (Hermes here) is parsed into `tool_calls`
//! with the text before it as content; conversations with tool turns are accepted; bad tool
//! requests are 400s naming the field.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use serde_json::{json, Value};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather", "description": "Current weather in a city",
            "parameters": {"type": "object",
                "properties": {"city": {"type": "string", "maxLength": 20},
                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {
            "name": "add", "description": "Add two integers",
            "parameters": {"type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"], "additionalProperties": false}}}
    ])
}

fn request(question: &str, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": question}],
        "tools": tools(),
        "temperature": 0,
        "max_tokens": 120,
    });
    for (k, v) in extra.as_object().expect("object").iter() {
        body[k] = v.clone();
    }
    body
}

/// Checks one call against its function's schema; returns (name, arguments).
fn checked_call(call: &Value) -> (String, Value) {
    assert_eq!(call["type"], "function", "{call}");
    let id = call["id"].as_str().expect("id");
    assert!(id.starts_with("chatcmpl-tool-") && id.len() > 20, "{id}");
    let name = call["function"]["name"].as_str().expect("name").to_string();
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().expect("args"))
        .unwrap_or_else(|e| panic!("arguments are JSON: {e}: {call}"));
    let obj = args.as_object().expect("arguments object");
    match name.as_str() {
        "get_weather" => {
            let city = obj["city"].as_str().expect("city is a string");
            assert!(city.chars().count() <= 20);
            if let Some(unit) = obj.get("unit") {
                assert!(unit == "celsius" || unit == "fahrenheit", "{unit}");
            }
            assert!(obj.keys().all(|k| k == "city" || k == "unit"), "{args}");
        }
        "add" => {
            assert!(obj["a"].is_i64() && obj["b"].is_i64(), "{args}");
            assert_eq!(obj.len(), 2, "{args}");
        }
        other => panic!("a function that was not offered: {other}"),
    }
    (name, args)
}

#[tokio::test]
async fn required_calls_satisfy_their_schemas() {
    let s = main_server();
    let body = request("What is 12 plus 30?", json!({"tool_choice": "required"}));
    let (status, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert!(choice["message"]["content"].is_null(), "{v}");
    let calls = choice["message"]["tool_calls"]
        .as_array()
        .expect("tool_calls");
    assert!(!calls.is_empty());
    for c in calls {
        checked_call(c);
    }

    let single = request(
        "What is the weather in Oslo?",
        json!({"tool_choice": "required", "parallel_tool_calls": false}),
    );
    let (status, v) = post(s, "/v1/chat/completions", &single).await;
    assert_eq!(status, 200, "{v}");
    let calls = v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .expect("calls");
    assert_eq!(
        calls.len(),
        1,
        "parallel_tool_calls: false allows one call: {v}"
    );
}

#[tokio::test]
async fn a_named_function_is_called() {
    let s = main_server();
    let body = request(
        "What is the weather in Rome?",
        json!({"tool_choice": {"type": "function", "function": {"name": "add"}}}),
    );
    let (status, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let calls = v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .expect("calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(checked_call(&calls[0]).0, "add");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
}

/// The calls and content of a streamed chat reply, and its finish reason.
fn collect_stream(payloads: &[String]) -> (String, Vec<Value>, Option<String>) {
    let mut content = String::new();
    let mut calls = BTreeMap::new();
    let mut reason = None;
    for p in payloads.iter().filter(|p| p.as_str() != "[DONE]") {
        let v: Value = serde_json::from_str(p).expect("chunk JSON");
        let Some(choice) = v["choices"].get(0) else {
            continue;
        };
        if let Some(c) = choice["delta"]["content"].as_str() {
            content.push_str(c);
        }
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = call["index"].as_u64().expect("index");
            assert!(
                calls.insert(index, call.clone()).is_none(),
                "each call is sent once"
            );
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            reason = Some(r.to_string());
        }
    }
    (content, calls.into_values().collect(), reason)
}

#[tokio::test]
async fn streamed_forced_calls_equal_the_whole_response() {
    let s = main_server();
    let body = request(
        "Add 2 and 5, then tell me the weather in Lima.",
        json!({"tool_choice": "required"}),
    );
    let (status, whole) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{whole}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (content, calls, reason) =
        collect_stream(&stream(s, "/v1/chat/completions", &streamed).await);
    assert_eq!(content, "", "forced calls carry no text");
    assert_eq!(reason.as_deref(), Some("tool_calls"));
    let want: Vec<_> = whole["choices"][0]["message"]["tool_calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(checked_call)
        .collect();
    let got: Vec<_> = calls.iter().map(checked_call).collect();
    assert_eq!(got, want, "greedy: the same calls streamed and whole");
}

/// A regex that makes the model write a Hermes call after a short text.
const HERMES_REPLY: &str = r#"Checking\.\n<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Paris"\}\}\n</tool_call>"#;

#[tokio::test]
async fn auto_reads_the_models_own_call_format() {
    let s = hermes_server();
    let body = request(
        "What is the weather in Paris?",
        json!({"tool_choice": "auto", "guided_regex": HERMES_REPLY}),
    );
    let (status, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], "Checking.\n", "{v}");
    let calls = msg["tool_calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        checked_call(&calls[0]),
        ("get_weather".into(), json!({"city": "Paris"}))
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (content, calls, reason) =
        collect_stream(&stream(s, "/v1/chat/completions", &streamed).await);
    assert_eq!(content, "Checking.\n");
    assert_eq!(calls.len(), 1);
    assert_eq!(checked_call(&calls[0]).1, json!({"city": "Paris"}));
    assert_eq!(reason.as_deref(), Some("tool_calls"));

    // Without a call in the reply, auto is plain text.
    let plain = request(
        "Say hi.",
        json!({"tool_choice": "auto", "guided_regex": "Hi there"}),
    );
    let (status, v) = post(s, "/v1/chat/completions", &plain).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "Hi there");
    assert!(
        v["choices"][0]["message"].get("tool_calls").is_none(),
        "{v}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn conversations_with_tool_turns_are_accepted() {
    let s = main_server();
    let body = json!({
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"}
        ],
        "tools": tools(),
        "tool_choice": "none",
        "max_tokens": 8,
        "temperature": 0,
    });
    let (status, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string());

    let mut broken = body.clone();
    broken["messages"][1]["tool_calls"][0]["function"]["arguments"] = json!("{oops");
    let (status, v) = post(s, "/v1/chat/completions", &broken).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "messages");
}

#[tokio::test]
async fn bad_tool_requests_are_400s_naming_the_field() {
    let s = main_server();
    let cases = [
        (json!({"tools": [{"type": "retrieval"}]}), "tools"),
        (
            json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
        ),
        (json!({"tool_choice": "sometimes"}), "tool_choice"),
        (json!({"tool_choice": "auto"}), "tool_choice"),
        (
            json!({"tool_choice": "required", "response_format": {"type": "json_object"}}),
            "tool_choice",
        ),
    ];
    for (extra, param) in cases {
        let body = request("Hi", extra.clone());
        let (status, v) = post(s, "/v1/chat/completions", &body).await;
        assert_eq!(status, 400, "{extra}: {v}");
        assert_eq!(v["error"]["param"], param, "{extra}: {v}");
    }
    let (status, v) = post(
        s,
        "/v1/chat/completions",
        &request("Hi", json!({"tool_choice": "auto"})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .expect("message")
            .contains("--tool-call-parser"),
        "{v}"
    );
    let mut no_tools = request("Hi", json!({"tool_choice": "required"}));
    no_tools.as_object_mut().expect("object").remove("tools");
    let (status, v) = post(s, "/v1/chat/completions", &no_tools).await;
    assert_eq!(status, 400, "{v}");
}
