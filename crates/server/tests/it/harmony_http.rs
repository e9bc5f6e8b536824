//! The harmony format over HTTP on `tests/fixtures/tiny-gpt-oss` (random weights, its harmony
//! chat template makes the server read replies as harmony: reasoning parser and tool-call
//! format both read off the template). The replies are crafted with `guided_grammar` (Lark,
//! naming harmony's special tokens as tokens), which makes the model write a given harmony
//! reply: the `analysis`
//! message must come back as `reasoning_content`, the `final` message as `content`, a
//! `commentary` message to `functions.NAME` as a tool call; whole and streamed. The same
//! replies through the Messages API (`thinking`, `text` and `tool_use` blocks; `guided_grammar`
//! is accepted there as on chat completions) and the Responses API (`reasoning` item, `message`
//! item with `output_text`, `function_call` item), each whole and as its SSE event sequence;
//! and `/v1/completions`, which has no channels: its text is the reply with harmony's special
//! tokens left out (they are skipped in detokenization, as every special token is).

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

/// The event names of a stream with runs of one name (the deltas) written once, ping left out.
fn event_runs(events: &[(String, Value)]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (name, _) in events.iter().filter(|(n, _)| n != "ping") {
        if names.last() != Some(name) {
            names.push(name.clone());
        }
    }
    names
}

fn messages_request(grammar: &str, extra: Value) -> Value {
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

fn anthropic_weather_tool() -> Value {
    json!([{"name": "get_weather", "description": "Current weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}])
}

#[tokio::test]
async fn messages_api_gives_analysis_as_a_thinking_block_and_final_as_text() {
    let body = messages_request(ANSWER_REPLY, json!({}));
    let (status, v) = common::post(server(), "/v1/messages", &body).await;
    assert_eq!(status, 200, "{v}");
    let content = v["content"].as_array().expect("content");
    assert_eq!(content.len(), 2, "{v}");
    assert_eq!(content[0]["type"], "thinking", "{v}");
    assert_eq!(content[0]["thinking"], "User says hi. Greet back.", "{v}");
    assert_eq!(
        content[1],
        json!({"type": "text", "text": "Hello there!"}),
        "{v}"
    );
    assert_eq!(v["stop_reason"], "end_turn", "{v}");

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = common::named_events(server(), "/v1/messages", &streamed).await;
    assert_eq!(
        event_runs(&events),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let message = crate::anthropic_http::reassemble(&events);
    assert_eq!(
        message["content"][0]["thinking"],
        "User says hi. Greet back."
    );
    assert_eq!(message["content"][1]["text"], "Hello there!");
    assert_eq!(message["stop_reason"], "end_turn");
}

#[tokio::test]
async fn messages_api_gives_a_commentary_call_as_tool_use() {
    let body = messages_request(
        CALL_REPLY,
        json!({"tools": anthropic_weather_tool(), "tool_choice": {"type": "auto"}}),
    );
    let (status, v) = common::post(server(), "/v1/messages", &body).await;
    assert_eq!(status, 200, "{v}");
    let content = v["content"].as_array().expect("content");
    assert_eq!(content.len(), 2, "{v}");
    assert_eq!(content[0]["thinking"], "Need the weather.", "{v}");
    assert_eq!(content[1]["type"], "tool_use", "{v}");
    assert_eq!(content[1]["name"], "get_weather", "{v}");
    assert_eq!(content[1]["input"], json!({"city": "Paris"}), "{v}");
    assert_eq!(v["stop_reason"], "tool_use", "{v}");

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = common::named_events(server(), "/v1/messages", &streamed).await;
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| &d["content_block"]["type"])
        .collect();
    assert_eq!(starts, [&json!("thinking"), &json!("tool_use")]);
    let message = crate::anthropic_http::reassemble(&events);
    assert_eq!(message["content"][0]["thinking"], "Need the weather.");
    assert_eq!(message["content"][1]["input"], json!({"city": "Paris"}));
    assert_eq!(message["stop_reason"], "tool_use");
}

#[tokio::test]
async fn messages_api_refuses_a_grammar_that_does_not_compile() {
    let body = messages_request("start: (", json!({}));
    let (status, v) = common::post(server(), "/v1/messages", &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let message = v["error"]["message"].as_str().expect("message");
    assert!(message.contains("invalid grammar"), "{v}");
}

fn responses_request(grammar: &str, extra: Value) -> Value {
    let mut body = json!({
        "input": "hi",
        "max_output_tokens": 120,
        "temperature": 0,
        "store": false,
        "guided_grammar": grammar,
    });
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    body
}

/// The `(type, text)` of each output item: reasoning and message text, call name and arguments.
fn items(output: &Value) -> Vec<(String, String)> {
    output
        .as_array()
        .expect("output")
        .iter()
        .map(|item| {
            let kind = item["type"].as_str().expect("type").to_string();
            let text = match kind.as_str() {
                "reasoning" | "message" => item["content"][0]["text"].as_str().map(String::from),
                "function_call" => Some(format!(
                    "{} {}",
                    item["name"].as_str().expect("name"),
                    item["arguments"].as_str().expect("arguments")
                )),
                _ => None,
            };
            (kind, text.unwrap_or_default())
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[tokio::test]
async fn responses_api_gives_analysis_as_a_reasoning_item_and_final_as_a_message() {
    let body = responses_request(ANSWER_REPLY, json!({}));
    let (status, v) = common::post(server(), "/v1/responses", &body).await;
    assert_eq!(status, 200, "{v}");
    let expected = pairs(&[
        ("reasoning", "User says hi. Greet back."),
        ("message", "Hello there!"),
    ]);
    assert_eq!(items(&v["output"]), expected, "{v}");
    assert_eq!(v["output"][1]["content"][0]["type"], "output_text", "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    let reasoning_tokens = v["usage"]["output_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .expect("reasoning tokens");
    assert!(reasoning_tokens >= 5, "{v}");

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = common::named_events(server(), "/v1/responses", &streamed).await;
    assert_eq!(
        event_runs(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let (_, done) = events.last().expect("events");
    assert_eq!(items(&done["response"]["output"]), expected);
}

#[tokio::test]
async fn responses_api_gives_a_commentary_call_as_a_function_call_item() {
    let tools = json!([{"type": "function", "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}]);
    let body = responses_request(CALL_REPLY, json!({"tools": tools, "tool_choice": "auto"}));
    let (status, v) = common::post(server(), "/v1/responses", &body).await;
    assert_eq!(status, 200, "{v}");
    let got = items(&v["output"]);
    assert_eq!(got.len(), 2, "{v}");
    assert_eq!(
        got[0],
        ("reasoning".into(), "Need the weather.".into()),
        "{v}"
    );
    let call = &v["output"][1];
    assert_eq!(
        (call["type"].as_str(), call["name"].as_str()),
        (Some("function_call"), Some("get_weather")),
        "{v}"
    );
    let args: Value = serde_json::from_str(call["arguments"].as_str().expect("args")).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = common::named_events(server(), "/v1/responses", &streamed).await;
    assert_eq!(
        event_runs(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let (_, done) = events.last().expect("events");
    assert_eq!(items(&done["response"]["output"]), got);
}

#[tokio::test]
async fn responses_api_refuses_a_grammar_beside_a_text_format() {
    let body = responses_request(
        ANSWER_REPLY,
        json!({"text": {"format": {"type": "json_object"}}}),
    );
    let (status, v) = common::post(server(), "/v1/responses", &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "guided_grammar", "{v}");
}

/// `/v1/completions` is raw text: no channels to split, and harmony's markers are special
/// tokens, left out of the text like every special token, so the reply's two messages run
/// together as the channel names and bodies.
#[tokio::test]
async fn completions_return_the_reply_without_its_special_tokens() {
    let body = json!({
        "prompt": "<|start|>user<|message|>hi<|end|><|start|>assistant",
        "max_tokens": 120,
        "temperature": 0,
        "guided_grammar": ANSWER_REPLY,
    });
    let (status, v) = common::post(server(), "/v1/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["choices"][0]["text"], "analysisUser says hi. Greet back.assistantfinalHello there!",
        "{v}"
    );
}
