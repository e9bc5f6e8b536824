//! The harmony format over HTTP on `tests/fixtures/tiny-gpt-oss` (random weights, its harmony
//! chat template makes the server read replies as harmony: reasoning parser and tool-call
//! format both read off the template). The replies are crafted with `guided_grammar` (Lark,
//! naming harmony's special tokens as tokens), which makes the model write a given harmony
//! reply: the `analysis`
//! message must come back as `reasoning_content`, the `final` message as `content`, a
//! `commentary` message to `functions.NAME` as a tool call; whole and streamed.

use std::sync::OnceLock;

use kestrel_server::launch::LaunchOptions;
use kestrel_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{self, Server};

const MODEL: &str = "tests/fixtures/tiny-gpt-oss";

/// An analysis message, then the final answer.
const ANSWER_REPLY: &str = r#"start: <|channel|> "analysis" <|message|> "User says hi. Greet back." <|end|> <|start|> "assistant" <|channel|> "final" <|message|> "Hello there!""#;
/// An analysis message, then a call to `get_weather`.
const CALL_REPLY: &str = r#"start: <|channel|> "analysis" <|message|> "Need the weather." <|end|> <|start|> "assistant" <|channel|> "commentary to=functions.get_weather " <|constrain|> "json" <|message|> "{\"city\": \"Paris\"}""#;

fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let opts = LaunchOptions {
            max_total_tokens: Some(1024),
            max_input_tokens: Some(800),
            ..common::options(8)
        };
        common::start_model(MODEL.as_ref(), opts, ServerConfig::default())
    })
}

fn request(grammar: &str, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 120,
        "temperature": 0,
        "guided_grammar": grammar,
    });
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    body
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}])
}

/// The reasoning, content and tool calls of a streamed chat reply, and its finish reason.
fn collect(payloads: &[String]) -> (String, String, Vec<Value>, Option<String>) {
    let (mut reasoning, mut content, mut calls, mut reason) =
        (String::new(), String::new(), Vec::new(), None);
    for p in payloads.iter().filter(|p| p.as_str() != "[DONE]") {
        let v: Value = serde_json::from_str(p).expect("chunk JSON");
        let Some(choice) = v["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
        content.push_str(delta["content"].as_str().unwrap_or_default());
        calls.extend(
            delta["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
        if let Some(r) = choice["finish_reason"].as_str() {
            reason = Some(r.to_string());
        }
    }
    (reasoning, content, calls, reason)
}

#[tokio::test]
async fn analysis_is_reasoning_and_final_is_the_answer() {
    let body = request(ANSWER_REPLY, json!({}));
    let (status, v) = common::post(server(), "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let message = &v["choices"][0]["message"];
    assert_eq!(
        message["reasoning_content"], "User says hi. Greet back.",
        "{v}"
    );
    assert_eq!(message["content"], "Hello there!", "{v}");
    let usage = &v["usage"];
    let reasoning_tokens = usage["completion_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .expect("reasoning tokens");
    assert!(reasoning_tokens >= 5, "{usage}");

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let payloads = common::stream(server(), "/v1/chat/completions", &streamed).await;
    let (reasoning, content, calls, _) = collect(&payloads);
    assert_eq!(reasoning, "User says hi. Greet back.");
    assert_eq!(content, "Hello there!");
    assert!(calls.is_empty());
}

#[tokio::test]
async fn a_commentary_message_to_a_function_is_a_tool_call() {
    let body = request(
        CALL_REPLY,
        json!({"tools": weather_tool(), "tool_choice": "auto"}),
    );
    let (status, v) = common::post(server(), "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(
        choice["message"]["reasoning_content"], "Need the weather.",
        "{v}"
    );
    assert!(choice["message"]["content"].is_null(), "{v}");
    let calls = choice["message"]["tool_calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().expect("args")).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    assert_eq!(choice["finish_reason"], "tool_calls");

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let payloads = common::stream(server(), "/v1/chat/completions", &streamed).await;
    let (reasoning, content, calls, reason) = collect(&payloads);
    assert_eq!(
        (reasoning.as_str(), content.as_str()),
        ("Need the weather.", "")
    );
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn without_tools_a_call_message_is_answer_text() {
    let (status, v) = common::post(
        server(),
        "/v1/chat/completions",
        &request(CALL_REPLY, json!({})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let message = &v["choices"][0]["message"];
    assert_eq!(message["content"], r#"{"city": "Paris"}"#, "{v}");
    assert!(message.get("tool_calls").is_none(), "{v}");
}
