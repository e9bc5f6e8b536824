//! The OpenAI Responses API over HTTP on the default model (`KESTREL_DEFAULT_MODEL`) and on
//! the tiny thinking Qwen3 fixture: created from text or items, whole and streamed (the
//! semantic events in order, numbered, and the same text as whole for greedy decoding),
//! `max_output_tokens` making it `incomplete`, forced function calls and their outputs,
//! `text.format`, the store (`GET`, `DELETE`, `previous_response_id` with the prefix cache,
//! `store: false`, eviction), reasoning items, an agent's (Codex-shaped) request, and the
//! errors, in OpenAI's shape.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kestrel_server::launch::LaunchOptions;
use kestrel_server::responses::store::{ResponseStore, StoreLimits};
use kestrel_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{self, Server};

const THINKER: &str = "tests/fixtures/tiny-qwen3-think";
const REASONING: &str = "the user wants a greeting\n";
const ANSWER: &str = "Hello there!";

/// `base` with the fields of `extra` set.
fn with(base: Value, extra: Value) -> Value {
    let mut body = base;
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    body
}

/// A greedy request for `input` (a string or items).
fn request(input: Value, extra: Value) -> Value {
    with(
        json!({"input": input, "temperature": 0, "max_output_tokens": 24}),
        extra,
    )
}

async fn create(s: &Server, body: &Value) -> Value {
    let (status, v) = common::post(s, "/v1/responses", body).await;
    assert_eq!(status, 200, "{v}");
    v
}

async fn send(s: &Server, method: reqwest::Method, path: &str) -> (u16, Value) {
    let resp = common::client()
        .request(method, format!("{}{path}", s.base))
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The text of a response's message items.
fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .expect("output")
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().expect("content").iter())
        .map(|p| p["text"].as_str().expect("text").to_string())
        .collect()
}

/// A streamed request's events: (SSE event name, data), checking that each names its type.
async fn stream(s: &Server, body: &Value) -> Vec<(String, Value)> {
    common::named_events(s, "/v1/responses", body).await
}

/// The names of `events`, and their data joined for `kind` (`delta` fields).
fn deltas(events: &[(String, Value)], kind: &str) -> String {
    events
        .iter()
        .filter(|(e, _)| e == kind)
        .map(|(_, d)| d["delta"].as_str().expect("delta").to_string())
        .collect()
}

fn assert_openai_error(v: &Value, param: Option<&str>) {
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    match param {
        Some(p) => assert_eq!(e["param"], p, "{v}"),
        None => assert!(e["param"].is_null(), "{v}"),
    }
}

#[tokio::test]
async fn a_response_from_text_or_items_has_the_openai_shape() {
    let s = common::main_server();
    let v = create(
        s,
        &request(
            json!("Say hello."),
            json!({"instructions": "Be brief.", "metadata": {"k": "v"}, "store": false}),
        ),
    )
    .await;
    assert!(v["id"].as_str().unwrap().starts_with("resp_"), "{v}");
    assert_eq!(v["object"], "response");
    assert!(v["created_at"].as_u64().unwrap() > 0);
    assert!(
        v["status"] == "completed" || v["status"] == "incomplete",
        "{v}"
    );
    assert_eq!(v["instructions"], "Be brief.");
    assert_eq!(v["metadata"], json!({"k": "v"}));
    assert_eq!(v["temperature"], 0.0);
    assert_eq!(v["store"], false);
    assert_eq!(v["text"], json!({"format": {"type": "text"}}));
    assert!(v["error"].is_null());
    let message = &v["output"][0];
    assert_eq!(message["type"], "message", "{v}");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["content"][0]["type"], "output_text");
    assert_eq!(message["content"][0]["annotations"], json!([]));
    assert!(!output_text(&v).is_empty(), "{v}");
    let u = &v["usage"];
    let (input, output) = (
        u["input_tokens"].as_u64().unwrap(),
        u["output_tokens"].as_u64().unwrap(),
    );
    assert!(input > 5 && output > 0, "{u}");
    assert_eq!(u["total_tokens"].as_u64().unwrap(), input + output);
    assert!(u["input_tokens_details"]["cached_tokens"].is_u64());
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 0);

    let items = json!([
        {"role": "developer", "content": "Answer in one word."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Name a color."}]},
    ]);
    let v = create(s, &request(items, json!({"store": false}))).await;
    assert_eq!(v["output"][0]["type"], "message", "{v}");
}

#[tokio::test]
async fn a_streamed_response_sends_numbered_events_and_the_whole_text() {
    let s = common::main_server();
    let body = request(json!("Count from one to five."), json!({"store": false}));
    let whole = create(s, &body).await;
    let events = stream(s, &with(body, json!({"stream": true}))).await;
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        names[..2],
        ["response.created", "response.in_progress"],
        "{names:?}"
    );
    let expected_tail = [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ];
    let n = names.len();
    assert_eq!(names[n - 4..n - 1], expected_tail, "{names:?}");
    assert_eq!(
        names[2..4],
        ["response.output_item.added", "response.content_part.added"]
    );
    assert!(
        names[4..n - 4]
            .iter()
            .all(|e| *e == "response.output_text.delta"),
        "{names:?}"
    );
    let last = names[n - 1];
    assert_eq!(
        last,
        format!("response.{}", whole["status"].as_str().unwrap())
    );
    for (i, (_, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], i as u64, "{data}");
    }
    let created = &events[0].1["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["output"], json!([]));
    let text = deltas(&events, "response.output_text.delta");
    assert_eq!(
        text,
        output_text(&whole),
        "greedy: streamed text equals the whole reply"
    );
    let done = &events[n - 4].1;
    assert_eq!(done["text"], text.as_str());
    let final_response = &events[n - 1].1["response"];
    assert_eq!(final_response["id"], created["id"]);
    assert_eq!(output_text(final_response), text);
    assert_eq!(
        final_response["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
    let item_id = &events[2].1["item"]["id"];
    assert_eq!(final_response["output"][0]["id"], *item_id);
}

#[tokio::test]
async fn max_output_tokens_makes_the_response_incomplete() {
    let s = common::main_server();
    let body = request(
        json!("Write a long story about a dragon."),
        json!({"max_output_tokens": 3, "store": false}),
    );
    let v = create(s, &body).await;
    assert_eq!(v["status"], "incomplete", "{v}");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(v["usage"]["output_tokens"], 3);
    assert_eq!(v["output"][0]["status"], "incomplete");
    assert_eq!(v["max_output_tokens"], 3);
    let events = stream(s, &with(body, json!({"stream": true}))).await;
    let (last, data) = events.last().unwrap();
    assert_eq!(last, "response.incomplete");
    assert_eq!(
        data["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
}

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": false},
        "strict": true})
}

/// The arguments of a `get_weather` call, checked against its schema.
fn weather_args(call: &Value) -> Value {
    assert_eq!(call["type"], "function_call", "{call}");
    assert_eq!(call["name"], "get_weather");
    assert!(call["id"].as_str().unwrap().starts_with("fc_"), "{call}");
    assert!(!call["call_id"].as_str().unwrap().is_empty());
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).expect("JSON");
    let city = args["city"].as_str().expect("city");
    assert!(city.chars().count() <= 20);
    assert!(
        args.as_object()
            .unwrap()
            .keys()
            .all(|k| k == "city" || k == "unit"),
        "{args}"
    );
    args
}

#[tokio::test]
async fn a_forced_function_call_satisfies_its_schema_and_its_output_continues() {
    let s = common::hermes_server();
    let forced = json!({"type": "function", "name": "get_weather"});
    let body = request(
        json!("What is the weather in Oslo?"),
        json!({"tools": [weather_tool(), {"type": "web_search"}], "tool_choice": forced,
               "max_output_tokens": 60}),
    );
    let v = create(s, &body).await;
    let calls: Vec<&Value> = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    assert_eq!(calls.len(), 1, "{v}");
    weather_args(calls[0]);
    assert_eq!(v["tool_choice"], forced);
    assert_eq!(
        v["tools"][1]["type"], "web_search",
        "tools are echoed as sent"
    );
    let call_id = calls[0]["call_id"].as_str().unwrap();

    let answer =
        json!([{"type": "function_call_output", "call_id": call_id, "output": "{\"temp\": 21}"}]);
    let next = request(
        answer,
        json!({"previous_response_id": v["id"], "tools": [weather_tool()], "tool_choice": "none"}),
    );
    let v2 = create(s, &next).await;
    assert_eq!(v2["output"][0]["type"], "message", "{v2}");
    assert_eq!(v2["previous_response_id"], v["id"]);
    assert!(
        v2["usage"]["input_tokens"].as_u64() > v["usage"]["input_tokens"].as_u64(),
        "{v2}"
    );

    // The same conversation sent whole, as stateless clients do.
    let items = json!([
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": calls[0]["arguments"]},
        {"type": "function_call_output", "call_id": call_id, "output": "{\"temp\": 21}"},
    ]);
    let v3 = create(
        s,
        &request(items, json!({"tools": [weather_tool()], "store": false})),
    )
    .await;
    assert_ne!(v3["status"], "failed", "{v3}");
    assert!(
        v3["usage"]["input_tokens"].as_u64() > v["usage"]["input_tokens"].as_u64(),
        "the call and its output are in the prompt: {v3}"
    );

    let events = stream(s, &with(body, json!({"stream": true, "store": false}))).await;
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    let at = names
        .iter()
        .position(|e| *e == "response.function_call_arguments.delta")
        .expect("arguments delta");
    assert_eq!(names[at - 1], "response.output_item.added");
    assert_eq!(
        names[at + 1..at + 3],
        [
            "response.function_call_arguments.done",
            "response.output_item.done"
        ]
    );
    let done = &events[at + 2].1["item"];
    weather_args(done);
    assert_eq!(events[at].1["delta"], done["arguments"]);
}

#[tokio::test]
async fn a_json_schema_text_format_is_followed() {
    let s = common::main_server();
    let schema = json!({"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false});
    let body = request(
        json!("Invent a person."),
        json!({"text": {"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": true}},
               "max_output_tokens": 60, "store": false}),
    );
    let v = create(s, &body).await;
    let person: Value = serde_json::from_str(&output_text(&v)).expect("the output is JSON");
    assert!(
        person["name"].is_string() && person["age"].is_i64(),
        "{person}"
    );
    assert_eq!(person.as_object().unwrap().len(), 2);
    assert_eq!(v["text"]["format"]["name"], "person");

    let bad = request(
        json!("x"),
        json!({"text": {"format": {"type": "json_schema", "name": "p"}}}),
    );
    let (status, e) = common::post(s, "/v1/responses", &bad).await;
    assert_eq!(status, 400, "{e}");
    assert_openai_error(&e, Some("text.format"));
}

#[tokio::test]
async fn a_stored_response_is_retrieved_then_deleted() {
    let s = common::main_server();
    let v = create(s, &request(json!("Hi!"), json!({}))).await;
    assert_eq!(v["store"], true);
    let id = v["id"].as_str().unwrap();
    let (status, got) = send(s, reqwest::Method::GET, &format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got, v, "GET returns the response as created");
    let (status, deleted) = send(s, reqwest::Method::DELETE, &format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response", "deleted": true})
    );
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, e) = send(s, method, &format!("/v1/responses/{id}")).await;
        assert_eq!(status, 404, "{e}");
        assert_openai_error(&e, None);
        assert!(e["error"]["message"].as_str().unwrap().contains(id), "{e}");
    }
    let next = request(json!("More."), json!({"previous_response_id": id}));
    let (status, e) = common::post(s, "/v1/responses", &next).await;
    assert_eq!(status, 404, "{e}");
    assert_openai_error(&e, Some("previous_response_id"));
}

#[tokio::test]
async fn a_continuation_rerenders_the_conversation_from_the_prefix_cache() {
    let s = common::main_server();
    let instructions = "You are a patient tutor. ".repeat(30);
    let first = create(
        s,
        &request(
            json!("What is a prime number?"),
            json!({"instructions": instructions}),
        ),
    )
    .await;
    let next = request(
        json!("Give an example."),
        json!({"instructions": instructions, "previous_response_id": first["id"]}),
    );
    let second = create(s, &next).await;
    let (u1, u2) = (&first["usage"], &second["usage"]);
    let cached = u2["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    let first_input = u1["input_tokens"].as_u64().unwrap();
    assert!(
        cached >= first_input / 2,
        "the earlier turns come from the cache: {u1} then {u2}"
    );
    assert!(
        u2["input_tokens"].as_u64().unwrap() > first_input + u1["output_tokens"].as_u64().unwrap(),
        "the continuation holds the first turn and its answer: {u1} then {u2}"
    );

    // Instructions are not carried over: without them the prompt is far shorter.
    let bare = request(
        json!("Give an example."),
        json!({"previous_response_id": first["id"], "store": false}),
    );
    let third = create(s, &bare).await;
    assert!(third["instructions"].is_null());
    assert!(
        third["usage"]["input_tokens"].as_u64().unwrap() < first_input,
        "{}",
        third["usage"]
    );
}

#[tokio::test]
async fn a_response_with_store_false_is_not_kept() {
    let s = common::main_server();
    let v = create(s, &request(json!("Hi."), json!({"store": false}))).await;
    let id = v["id"].as_str().unwrap();
    let (status, e) = send(s, reqwest::Method::GET, &format!("/v1/responses/{id}")).await;
    assert_eq!(status, 404, "{e}");
    let streamed = stream(
        s,
        &request(json!("Hi."), json!({"store": false, "stream": true})),
    )
    .await;
    let id = streamed[0].1["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = send(s, reqwest::Method::GET, &format!("/v1/responses/{id}")).await;
    assert_eq!(status, 404);
    // A streamed response with store (the default) is kept once it ends.
    let streamed = stream(s, &request(json!("Hi."), json!({"stream": true}))).await;
    let (_, last) = streamed.last().unwrap();
    let id = last["response"]["id"].as_str().unwrap();
    let (status, got) = send(s, reqwest::Method::GET, &format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(got, last["response"]);
}

#[tokio::test]
async fn a_full_store_evicts_its_oldest_response() {
    static S: OnceLock<Server> = OnceLock::new();
    let s = S.get_or_init(|| {
        let store = ResponseStore::new(StoreLimits {
            max_entries: 2,
            ttl: Duration::from_secs(600),
        });
        let config = ServerConfig {
            response_store: Arc::new(store),
            ..ServerConfig::default()
        };
        common::start(common::options(4), config)
    });
    let mut ids = Vec::new();
    for word in ["one", "two", "three"] {
        let v = create(s, &request(json!(word), json!({"max_output_tokens": 2}))).await;
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    let status = |id: String| async move {
        send(s, reqwest::Method::GET, &format!("/v1/responses/{id}"))
            .await
            .0
    };
    assert_eq!(status(ids[0].clone()).await, 404, "the oldest was evicted");
    assert_eq!(status(ids[1].clone()).await, 200);
    assert_eq!(status(ids[2].clone()).await, 200);
}

#[tokio::test]
async fn bad_requests_are_refused_in_the_openai_shape() {
    let s = common::main_server();
    let cases = [
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]}),
            "input",
            "input_image",
        ),
        (
            json!({"input": "hi", "previous_response_id": "resp_nope"}),
            "previous_response_id",
            "resp_nope",
        ),
        (json!({"model": "x"}), "input", "input"),
        (
            json!({"input": "hi", "background": true}),
            "background",
            "background",
        ),
        (
            json!({"input": "hi", "tools": [weather_tool()], "tool_choice": {"type": "web_search_preview"}}),
            "tool_choice",
            "web_search_preview",
        ),
        (
            json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
            "input",
            "item_reference",
        ),
        (
            json!({"input": "hi", "temperature": 9}),
            "temperature",
            "temperature",
        ),
    ];
    for (body, param, needle) in cases {
        let (status, e) = common::post(s, "/v1/responses", &body).await;
        let expected = if param == "previous_response_id" {
            404
        } else {
            400
        };
        assert_eq!(status, expected, "{body} -> {e}");
        assert_openai_error(&e, Some(param));
        assert!(
            e["error"]["message"].as_str().unwrap().contains(needle),
            "{e}"
        );
    }
    let (status, text) = common::post_raw(s, "/v1/responses", b"{\"input\": ".to_vec()).await;
    assert_eq!(status, 400, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn unknown_fields_follow_the_api_policy() {
    let body = request(
        json!("Hi."),
        json!({"store": false, "frobnicate": 1, "max_output_tokens": 2}),
    );
    create(common::main_server(), &body).await;
    let (status, e) = common::post(common::strict_server(), "/v1/responses", &body).await;
    assert_eq!(status, 400, "{e}");
    assert_openai_error(&e, Some("frobnicate"));
}

#[tokio::test]
async fn an_agent_request_with_many_tool_types_is_served() {
    let mut body: Value =
        serde_json::from_str(include_str!("../fixtures/codex_responses_request.json"))
            .expect("fixture");
    body["max_output_tokens"] = json!(48);
    let events = stream(common::hermes_server(), &body).await;
    let (last, data) = events.last().unwrap();
    assert!(
        last == "response.completed" || last == "response.incomplete",
        "{last}: {data}"
    );
    assert_eq!(data["response"]["store"], false);
    assert_eq!(
        data["response"]["prompt_cache_key"],
        body["prompt_cache_key"]
    );
}

#[tokio::test]
async fn response_routes_are_counted_by_template() {
    let s = common::main_server();
    let (status, _) = send(
        s,
        reqwest::Method::GET,
        "/v1/responses/resp_counted_by_template",
    )
    .await;
    assert_eq!(status, 404);
    let (_, metrics) = common::get(s, "/metrics").await;
    assert!(
        metrics.contains(r#"route="/v1/responses/{id}""#),
        "{metrics}"
    );
    assert!(!metrics.contains("resp_counted_by_template"));
}

/// The thinking fixture.
fn thinker() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let opts = LaunchOptions {
            max_total_tokens: Some(256),
            max_input_tokens: Some(192),
            ..common::options(8)
        };
        common::start_model(THINKER.as_ref(), opts, ServerConfig::default())
    })
}

#[tokio::test]
async fn reasoning_comes_as_a_reasoning_item_whole_and_streamed() {
    let s = thinker();
    let body = json!({"input": "good morning to you", "max_output_tokens": 48, "temperature": 0, "store": false});
    let v = create(s, &body).await;
    let reasoning = &v["output"][0];
    assert_eq!(reasoning["type"], "reasoning", "{v}");
    assert!(reasoning["id"].as_str().unwrap().starts_with("rs_"));
    assert_eq!(reasoning["summary"], json!([]));
    assert_eq!(
        reasoning["content"],
        json!([{"type": "reasoning_text", "text": REASONING}])
    );
    assert_eq!(v["output"][1]["type"], "message");
    assert_eq!(output_text(&v), ANSWER);
    let reasoning_tokens = v["usage"]["output_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        reasoning_tokens >= 3 && reasoning_tokens < v["usage"]["output_tokens"].as_u64().unwrap()
    );

    let events = stream(s, &with(body, json!({"stream": true}))).await;
    assert_eq!(deltas(&events, "response.reasoning_text.delta"), REASONING);
    assert_eq!(deltas(&events, "response.output_text.delta"), ANSWER);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    let reasoning_done = names
        .iter()
        .position(|e| *e == "response.reasoning_text.done")
        .unwrap();
    let message_added = names
        .iter()
        .rposition(|e| *e == "response.output_item.added")
        .unwrap();
    assert!(reasoning_done < message_added, "{names:?}");
    assert_eq!(events[message_added].1["output_index"], 1);
    let (_, last) = events.last().unwrap();
    let output = &last["response"]["output"];
    assert_eq!(output[0]["content"][0]["text"], REASONING);
    assert_eq!(output[1]["content"][0]["text"], ANSWER);
    assert_eq!(
        last["response"]["usage"]["output_tokens_details"]["reasoning_tokens"],
        reasoning_tokens
    );
}

#[tokio::test]
async fn the_openapi_document_describes_the_response_routes() {
    let (status, text) = common::get(common::main_server(), "/openapi.json").await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&text).unwrap();
    let create = &doc["paths"]["/v1/responses"]["post"];
    for code in ["200", "400", "404", "429"] {
        assert!(
            create["responses"][code].is_object(),
            "POST /v1/responses {code}"
        );
    }
    assert!(create["responses"]["200"]["content"]["text/event-stream"].is_object());
    let by_id = &doc["paths"]["/v1/responses/{id}"];
    for method in ["get", "delete"] {
        for code in ["200", "401", "404"] {
            assert!(
                by_id[method]["responses"][code].is_object(),
                "{method} {code}"
            );
        }
    }
    assert!(doc["components"]["schemas"]["ResponseObject"].is_object());
}

#[tokio::test]
async fn a_call_of_a_namespaced_function_names_its_namespace() {
    let agents = json!({"type": "namespace", "name": "agents", "description": "Sub-agents",
        "tools": [{"type": "function", "name": "close_agent", "description": "Close an agent",
                   "parameters": {"type": "object", "properties": {"target": {"type": "string", "maxLength": 12}},
                                  "required": ["target"], "additionalProperties": false}}]});
    let body = request(
        json!("Close agent 7."),
        json!({"tools": [weather_tool(), agents], "tool_choice": {"type": "function", "name": "close_agent"},
               "max_output_tokens": 40, "store": false}),
    );
    let v = create(common::main_server(), &body).await;
    let call = &v["output"][0];
    assert_eq!(call["type"], "function_call", "{v}");
    assert_eq!(call["name"], "close_agent");
    assert_eq!(call["namespace"], "agents");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["target"].is_string(), "{args}");
    let plain = request(
        json!("Weather in Oslo?"),
        json!({"tools": [weather_tool()], "tool_choice": "required", "max_output_tokens": 40, "store": false}),
    );
    let v = create(common::main_server(), &plain).await;
    assert!(v["output"][0].get("namespace").is_none(), "{v}");
}
