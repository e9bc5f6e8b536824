//! Anthropic's Messages API over HTTP on the real default model (`KESTREL_DEFAULT_MODEL`):
//! `POST /v1/messages` whole and streamed (Anthropic's named events, reassembling to the whole
//! reply under greedy decoding), stop sequences and `max_tokens` as stop reasons, forced tools
//! whose input satisfies the schema, tool results in the prompt, `count_tokens` equal to a
//! create's input plus cache reads, cache reads on a repeated prompt, `x-api-key`, the error
//! shape, and a trimmed request body Claude Code sends.

use crate::common;

use common::*;
use serde_json::{json, Value};

/// A request body with `extra` fields set over the defaults.
fn body(prompt: &str, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 24,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    body
}

/// POSTs with extra headers; returns status and parsed body.
pub async fn post_with(
    server: &Server,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut req = client()
        .post(format!("{}{path}", server.base))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path} returned non-JSON ({e}): {text}"));
    (status, value)
}

/// A streamed request's named events (see [`common::named_events`]).
pub async fn events(server: &Server, path: &str, body: &Value) -> Vec<(String, Value)> {
    common::named_events(server, path, body).await
}

/// A streamed message put back together from its events (after checking their order): the
/// message of `message_start` with the blocks and the `message_delta` applied.
pub fn reassemble(events: &[(String, Value)]) -> Value {
    let names: Vec<&str> = events
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != "ping")
        .collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(
        &names[names.len() - 2..],
        ["message_delta", "message_stop"],
        "{names:?}"
    );
    let mut message = events[0].1["message"].clone();
    assert_eq!(message["content"], json!([]));
    assert!(message["stop_reason"].is_null());
    let mut blocks: Vec<Value> = Vec::new();
    let mut open: Option<usize> = None;
    let mut partial_json = String::new();
    for (name, data) in events {
        match name.as_str() {
            "content_block_start" => {
                assert_eq!(open, None, "a block opens while another is open");
                let index = data["index"].as_u64().expect("index") as usize;
                assert_eq!(index, blocks.len(), "blocks are numbered in order");
                blocks.push(data["content_block"].clone());
                open = Some(index);
                partial_json.clear();
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().expect("index") as usize;
                assert_eq!(Some(index), open, "a delta for the open block");
                let (block, delta) = (&mut blocks[index], &data["delta"]);
                match delta["type"].as_str() {
                    Some("text_delta") => append(block, "text", &delta["text"]),
                    Some("thinking_delta") => append(block, "thinking", &delta["thinking"]),
                    Some("input_json_delta") => {
                        partial_json.push_str(delta["partial_json"].as_str().expect("partial"));
                    }
                    other => panic!("unknown delta {other:?}"),
                }
            }
            "content_block_stop" => {
                let index = data["index"].as_u64().expect("index") as usize;
                assert_eq!(Some(index), open);
                if blocks[index]["type"] == "tool_use" {
                    blocks[index]["input"] =
                        serde_json::from_str(&partial_json).expect("the input is JSON");
                }
                open = None;
            }
            "message_delta" => {
                assert_eq!(open, None, "every block closed before message_delta");
                message["stop_reason"] = data["delta"]["stop_reason"].clone();
                message["stop_sequence"] = data["delta"]["stop_sequence"].clone();
                message["usage"] = data["usage"].clone();
            }
            _ => {}
        }
    }
    message["content"] = Value::Array(blocks);
    message
}

fn append(block: &mut Value, field: &str, more: &Value) {
    let text = format!(
        "{}{}",
        block[field].as_str().unwrap_or_default(),
        more.as_str().expect("delta text")
    );
    block[field] = Value::String(text);
}

/// The text of a message's text blocks.
fn text(message: &Value) -> String {
    message["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().expect("text"))
        .collect()
}

async fn create(server: &Server, body: &Value) -> Value {
    let (status, v) = post(server, "/v1/messages", body).await;
    assert_eq!(status, 200, "{v}");
    v
}

async fn served_model(server: &Server) -> String {
    let (_, models) = get(server, "/v1/models").await;
    let models: Value = serde_json::from_str(&models).expect("models");
    models["data"][0]["id"].as_str().expect("id").to_string()
}

#[tokio::test]
async fn a_message_is_created_in_anthropics_shape() {
    let s = main_server();
    let model = served_model(s).await;
    let m = create(s, &body("Say hello.", json!({"model": model}))).await;
    assert!(
        m["id"].as_str().is_some_and(|id| id.starts_with("msg_")),
        "{m}"
    );
    assert_eq!(
        (m["type"].as_str(), m["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert_eq!(m["model"], model.as_str());
    assert_eq!(m["content"][0]["type"], "text", "{m}");
    assert!(!text(&m).is_empty(), "{m}");
    assert!(
        ["end_turn", "max_tokens"].contains(&m["stop_reason"].as_str().unwrap_or("")),
        "{m}"
    );
    assert!(m["stop_sequence"].is_null());
    let usage = &m["usage"];
    assert!(
        usage["input_tokens"].as_u64().is_some_and(|n| n > 0),
        "{usage}"
    );
    assert!(
        usage["output_tokens"]
            .as_u64()
            .is_some_and(|n| (1..=24).contains(&n)),
        "{usage}"
    );
    assert_eq!(usage["cache_creation_input_tokens"], 0);
    assert!(usage["cache_read_input_tokens"].is_u64());
}

#[tokio::test]
async fn a_streamed_message_has_anthropics_events_and_equals_the_whole_one() {
    let s = main_server();
    let request = body("Name three colors.", json!({"max_tokens": 20}));
    let whole = create(s, &request).await;
    let events = events(
        s,
        "/v1/messages",
        &body(
            "Name three colors.",
            json!({"max_tokens": 20, "stream": true}),
        ),
    )
    .await;
    let start = &events[0].1["message"];
    assert_eq!(
        start["id"].as_str().map(|i| i.starts_with("msg_")),
        Some(true)
    );
    assert!(start["usage"]["input_tokens"]
        .as_u64()
        .is_some_and(|n| n > 0));
    let streamed = reassemble(&events);
    assert_eq!(streamed["content"], whole["content"], "{streamed}\n{whole}");
    assert_eq!(streamed["stop_reason"], whole["stop_reason"]);
    assert_eq!(
        streamed["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
    let prompt = |m: &Value| {
        m["usage"]["input_tokens"].as_u64().unwrap_or(0)
            + m["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0)
    };
    assert_eq!(prompt(&streamed), prompt(&whole));
}

#[tokio::test]
async fn a_stop_sequence_ends_the_reply_and_is_named() {
    let s = main_server();
    let prompt = "Write two sentences about the sea.";
    let free = create(s, &body(prompt, json!({"max_tokens": 40}))).await;
    let free_text = text(&free);
    let words: Vec<&str> = free_text.split_whitespace().collect();
    assert!(words.len() >= 4, "{free}");
    let stop = format!(" {}", words[2]);
    let expected = &free_text[..free_text.find(&stop).expect("stop in text")];
    let extra = json!({"max_tokens": 40, "stop_sequences": ["@@never@@", stop]});
    let stopped = create(s, &body(prompt, extra.clone())).await;
    assert_eq!(stopped["stop_reason"], "stop_sequence", "{stopped}");
    assert_eq!(stopped["stop_sequence"], stop.as_str());
    assert_eq!(text(&stopped), expected);
    let mut streamed_body = body(prompt, extra);
    streamed_body["stream"] = json!(true);
    let streamed = reassemble(&events(s, "/v1/messages", &streamed_body).await);
    assert_eq!(streamed["stop_reason"], "stop_sequence", "{streamed}");
    assert_eq!(streamed["stop_sequence"], stop.as_str());
    assert_eq!(text(&streamed), expected);
}

#[tokio::test]
async fn max_tokens_is_a_stop_reason_and_a_large_one_is_cut_to_fit() {
    let s = main_server();
    let m = create(
        s,
        &body(
            "Tell me a long story about a dragon.",
            json!({"max_tokens": 3}),
        ),
    )
    .await;
    assert_eq!(m["stop_reason"], "max_tokens", "{m}");
    assert_eq!(m["usage"]["output_tokens"], 3);
    // Clients send their model's output limit, beyond this server's context.
    let m = create(
        s,
        &body(
            "Hi",
            json!({"max_tokens": 64000, "temperature": 0, "stop_sequences": ["."]}),
        ),
    )
    .await;
    assert!(
        m["usage"]["output_tokens"].as_u64().is_some_and(|n| n > 0),
        "{m}"
    );
}

fn weather_tool() -> Value {
    json!([{
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": false},
        "cache_control": {"type": "ephemeral"}
    }])
}

/// Checks a `tool_use` block against the weather tool's schema.
fn checked_tool_use(block: &Value) {
    assert_eq!(block["type"], "tool_use", "{block}");
    assert!(
        block["id"]
            .as_str()
            .is_some_and(|i| i.starts_with("toolu_")),
        "{block}"
    );
    assert_eq!(block["name"], "get_weather");
    let input = block["input"].as_object().expect("input object");
    assert!(
        input["city"]
            .as_str()
            .is_some_and(|c| c.chars().count() <= 20),
        "{block}"
    );
    if let Some(unit) = input.get("unit") {
        assert!(unit == "celsius" || unit == "fahrenheit", "{unit}");
    }
    assert!(input.keys().all(|k| k == "city" || k == "unit"), "{block}");
}

#[tokio::test]
async fn a_forced_tool_gets_input_that_satisfies_its_schema() {
    let s = main_server();
    for choice in [
        json!({"type": "tool", "name": "get_weather"}),
        json!({"type": "any", "disable_parallel_tool_use": true}),
    ] {
        let extra = json!({"tools": weather_tool(), "tool_choice": choice, "max_tokens": 80});
        let m = create(s, &body("What is the weather in Paris?", extra.clone())).await;
        assert_eq!(m["stop_reason"], "tool_use", "{m}");
        let calls: Vec<&Value> = m["content"]
            .as_array()
            .expect("content")
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .collect();
        assert_eq!(calls.len(), 1, "{m}");
        checked_tool_use(calls[0]);
        let mut streamed = body("What is the weather in Paris?", extra);
        streamed["stream"] = json!(true);
        let streamed = reassemble(&events(s, "/v1/messages", &streamed).await);
        assert_eq!(streamed["stop_reason"], "tool_use", "{streamed}");
        let block = streamed["content"]
            .as_array()
            .and_then(|c| c.last())
            .expect("a block");
        checked_tool_use(block);
        assert_eq!(
            block["input"], calls[0]["input"],
            "streamed input equals the whole one"
        );
    }
}

/// A conversation that called the weather tool, answered with `result`.
fn tool_round_trip(result: &str) -> Value {
    json!({
        "max_tokens": 16,
        "temperature": 0,
        "tools": weather_tool(),
        "messages": [
            {"role": "user", "content": "What is the weather in Oslo?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should look it up.", "signature": "sig"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": result}]},
                {"type": "text", "text": "Summarize it.", "cache_control": {"type": "ephemeral"}}]}
        ]
    })
}

#[tokio::test]
async fn tool_results_reach_the_prompt() {
    let s = hermes_server();
    let short = tool_round_trip("Rain.");
    let long =
        tool_round_trip("Rain, 4 degrees, wind from the north at 30 km/h, clearing by noon.");
    let m = create(s, &short).await;
    assert!(
        ["end_turn", "max_tokens", "tool_use"].contains(&m["stop_reason"].as_str().unwrap_or("")),
        "{m}"
    );
    let (_, a) = post(s, "/v1/messages/count_tokens", &short).await;
    let (_, b) = post(s, "/v1/messages/count_tokens", &long).await;
    let (a, b) = (
        a["input_tokens"].as_u64().expect("count"),
        b["input_tokens"].as_u64().expect("count"),
    );
    assert!(b > a + 10, "the tool result is in the prompt: {a} vs {b}");
    let mut failed = short.clone();
    failed["messages"][2]["content"][0]["is_error"] = json!(true);
    let (_, c) = post(s, "/v1/messages/count_tokens", &failed).await;
    assert!(
        c["input_tokens"].as_u64().expect("count") > a,
        "an error result is marked"
    );
}

#[tokio::test]
async fn count_tokens_is_a_creates_input_plus_cache_reads() {
    let s = hermes_server();
    let mut request = body(
        "How many legs does a spider have?",
        json!({"max_tokens": 4, "tools": weather_tool()}),
    );
    request["system"] =
        json!([{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]);
    let m = create(s, &request).await;
    let (status, count) = post(s, "/v1/messages/count_tokens", &request).await;
    assert_eq!(status, 200, "{count}");
    let used = m["usage"]["input_tokens"].as_u64().expect("input")
        + m["usage"]["cache_read_input_tokens"]
            .as_u64()
            .expect("cache");
    assert_eq!(count["input_tokens"].as_u64(), Some(used), "{count} vs {m}");
    // The system prompt is counted (this model's template does not show tools).
    let mut longer = request.clone();
    let rules = "Answer in one word. Never explain. Use lowercase only. ".repeat(4);
    longer["system"] = json!([longer["system"][0].clone(), {"type": "text", "text": rules}]);
    let (_, more) = post(s, "/v1/messages/count_tokens", &longer).await;
    assert!(
        more["input_tokens"].as_u64().expect("count") > used + 30,
        "{more} vs {used}"
    );
}

#[tokio::test]
async fn a_repeated_long_prompt_is_read_from_the_cache() {
    let s = main_server();
    let nonce = format!("{:?}", std::time::Instant::now());
    let system = format!(
        "Session {nonce}. {}",
        "The quick brown fox jumps over the lazy dog. ".repeat(20)
    );
    let mut request = body("Continue the pattern.", json!({"max_tokens": 2}));
    request["system"] = json!(system);
    let first = create(s, &request).await;
    assert_eq!(first["usage"]["cache_read_input_tokens"], 0, "{first}");
    let second = create(s, &request).await;
    let cached = second["usage"]["cache_read_input_tokens"]
        .as_u64()
        .expect("cache reads");
    let input = second["usage"]["input_tokens"].as_u64().expect("input");
    let prompt = first["usage"]["input_tokens"].as_u64().expect("input");
    assert!(cached >= 128, "{second}");
    assert_eq!(
        input + cached,
        prompt,
        "input tokens exclude cache reads: {second}"
    );
}

#[tokio::test]
async fn x_api_key_authenticates_and_a_refusal_is_anthropic_shaped() {
    let s = keyed_server();
    let request = body("Hi", json!({"max_tokens": 2}));
    let version = ("anthropic-version", "2023-06-01");
    let beta = ("anthropic-beta", "prompt-caching-2024-07-31");
    let (status, m) = post_with(
        s,
        "/v1/messages",
        &request,
        &[("x-api-key", KEY), version, beta],
    )
    .await;
    assert_eq!(status, 200, "{m}");
    let bearer = format!("Bearer {KEY}");
    let (status, _) = post_with(s, "/v1/messages", &request, &[("authorization", &bearer)]).await;
    assert_eq!(status, 200);
    for headers in [vec![version], vec![("x-api-key", "sk-wrong"), version]] {
        let (status, e) = post_with(s, "/v1/messages", &request, &headers).await;
        assert_eq!(status, 401, "{e}");
        assert_eq!(e["type"], "error", "{e}");
        assert_eq!(e["error"]["type"], "authentication_error", "{e}");
    }
    // x-api-key works on the other routes too; their refusals keep OpenAI's shape.
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let (status, _) = post_with(s, "/v1/chat/completions", &chat, &[("x-api-key", KEY)]).await;
    assert_eq!(status, 200);
    let (status, e) = post_with(s, "/v1/chat/completions", &chat, &[]).await;
    assert_eq!(
        (status, &e["error"]["type"]),
        (401, &json!("authentication_error")),
        "{e}"
    );
}

/// Checks an Anthropic error body.
fn anthropic_error(status: u16, v: &Value, expected: u16, kind: &str, mentions: &str) {
    assert_eq!(status, expected, "{v}");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], kind, "{v}");
    let message = v["error"]["message"].as_str().expect("message");
    assert!(
        message.contains(mentions),
        "{message:?} should mention {mentions:?}"
    );
}

#[tokio::test]
async fn errors_are_anthropic_shaped() {
    let s = main_server();
    let mut missing = body("Hi", json!({}));
    missing
        .as_object_mut()
        .expect("object")
        .remove("max_tokens");
    let (status, v) = post(s, "/v1/messages", &missing).await;
    anthropic_error(status, &v, 400, "invalid_request_error", "max_tokens");
    let image = json!({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]});
    let (status, v) = post(s, "/v1/messages", &image).await;
    anthropic_error(status, &v, 400, "invalid_request_error", "\"image\"");
    let mut document = image.clone();
    document["messages"][0]["content"][1]["type"] = json!("document");
    let (status, v) = post(s, "/v1/messages", &document).await;
    anthropic_error(status, &v, 400, "invalid_request_error", "\"document\"");
    let (status, text) = post_raw(s, "/v1/messages", b"{\"messages\": [".to_vec()).await;
    let v: Value = serde_json::from_str(&text).expect("JSON error");
    anthropic_error(status, &v, 400, "invalid_request_error", "JSON");
    let (status, v) = post(
        s,
        "/v1/messages",
        &body("Hi", json!({"model": "claude-no-such-model"})),
    )
    .await;
    anthropic_error(status, &v, 404, "not_found_error", "claude-no-such-model");
    let server_tool = json!([{"type": "web_search_20250305", "name": "web_search"}]);
    let (status, v) = post(
        s,
        "/v1/messages",
        &body("Hi", json!({"tools": server_tool})),
    )
    .await;
    anthropic_error(
        status,
        &v,
        400,
        "invalid_request_error",
        "web_search_20250305",
    );
    let (status, v) = post(
        s,
        "/v1/messages/count_tokens",
        &json!({"messages": [{"role": "robot", "content": "x"}]}),
    )
    .await;
    anthropic_error(status, &v, 400, "invalid_request_error", "robot");
    let (status, v) = get(s, "/v1/messages").await;
    let v: Value = serde_json::from_str(&v).expect("JSON error");
    anthropic_error(status, &v, 405, "invalid_request_error", "GET");
    let (status, v) = post(s, "/v1/messages", &body("Hi", json!({"temperature": 7}))).await;
    anthropic_error(status, &v, 400, "invalid_request_error", "temperature");
}

#[tokio::test]
async fn unknown_fields_follow_the_api_policy() {
    let extra = json!({"context_management": {"edits": []}, "max_tokens": 2});
    let (status, v) = post(main_server(), "/v1/messages", &body("Hi", extra.clone())).await;
    assert_eq!(status, 200, "lenient by default: {v}");
    let (status, v) = post(strict_server(), "/v1/messages", &body("Hi", extra)).await;
    anthropic_error(
        status,
        &v,
        400,
        "invalid_request_error",
        "context_management",
    );
}

#[tokio::test]
async fn a_claude_code_request_is_accepted() {
    let s = main_server();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/anthropic/claude-code-request.json"
    );
    let mut request: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
    request["model"] = json!(served_model(s).await);
    assert_eq!(request["thinking"]["type"], "adaptive");
    assert_eq!(request["messages"][1]["role"], "system");
    let streamed = reassemble(&events(s, "/v1/messages?beta=true", &request).await);
    assert!(streamed["stop_reason"].is_string(), "{streamed}");
    let (status, count) = post(s, "/v1/messages/count_tokens?beta=true", &request).await;
    assert_eq!(status, 200, "{count}");
    let usage = &streamed["usage"];
    let used = usage["input_tokens"].as_u64().unwrap_or(0)
        + usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
    assert_eq!(count["input_tokens"].as_u64(), Some(used));
    // Claude Code probes the server with `HEAD /` first.
    let resp = client()
        .head(format!("{}/", s.base))
        .send()
        .await
        .expect("send");
    assert!(resp.status().is_success(), "{}", resp.status());
}

/// A server that admits one request at once (for the 529 test only).
fn single_server() -> &'static Server {
    static S: std::sync::OnceLock<Server> = std::sync::OnceLock::new();
    S.get_or_init(|| start(options(1), kestrel_server::ServerConfig::default()))
}

#[tokio::test]
async fn a_full_server_answers_529_overloaded_with_retry_after() {
    let s = single_server();
    let long = json!({"max_tokens": 400, "stream": true, "temperature": 0,
                      "messages": [{"role": "user", "content": "Count to one thousand."}]});
    let mut open = client()
        .post(format!("{}/v1/messages", s.base))
        .body(long.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(open.status().as_u16(), 200);
    let first = open.chunk().await.expect("chunk").expect("message_start");
    assert!(String::from_utf8_lossy(&first).starts_with("event: message_start\n"));
    let resp = client()
        .post(format!("{}/v1/messages", s.base))
        .body(body("Hi", json!({"max_tokens": 2})).to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 529);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("secs");
    assert!(retry >= 1);
    let v: Value = serde_json::from_str(&resp.text().await.expect("body")).expect("JSON");
    assert_eq!(
        (&v["type"], &v["error"]["type"]),
        (&json!("error"), &json!("overloaded_error")),
        "{v}"
    );
    drop(open);
}
