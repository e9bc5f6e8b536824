//! One API suite, run against `kestrel serve` and against a gateway with two workers of the
//! same model: every case must get the same status and the same body (greedy text, logprobs,
//! embeddings, tool calls, error shapes), ids and timestamps aside. A streamed answer is
//! compared by its content: the text and finish reason of each choice, its logprobs and usage,
//! and the shapes of its chunks (keys and value types), whatever the chunk boundaries. This is
//! the proof that a client cannot tell the fleet from one server; docs/deployment.md's route
//! table lists what it covers.

use crate::fleet_common;

use std::time::Duration;

use fleet_common::*;
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(180);

/// Fields that differ between any two answers (ids, clocks) or name the process.
const VOLATILE: &[&str] = &[
    "id",
    "created",
    "created_at",
    "system_fingerprint",
    "request_id",
];

/// One request of the suite.
struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    body: Value,
}

fn case(name: &'static str, method: &'static str, path: &'static str, body: Value) -> Case {
    Case {
        name,
        method,
        path,
        body,
    }
}

fn weather_tool() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
                "additionalProperties": false
            }
        }
    }])
}

fn chat(content: &str) -> Value {
    json!([{"role": "user", "content": content}])
}

/// The suite: every route family `serve` answers, good and bad input; `model` is the served
/// model's name (Anthropic's routes require one).
fn cases(model: &str) -> Vec<Case> {
    vec![
        case(
            "chat, greedy",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("Name three colours."), "max_tokens": 16, "temperature": 0}),
        ),
        case(
            "chat, greedy with logprobs",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("Say hello."), "max_tokens": 6, "temperature": 0,
                   "logprobs": true, "top_logprobs": 2}),
        ),
        case(
            "completion, greedy with logprobs",
            "POST",
            "/v1/completions",
            json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
                   "logprobs": 2}),
        ),
        case(
            "chat, streamed with usage",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("Name three colours."), "max_tokens": 16, "temperature": 0,
                   "stream": true, "stream_options": {"include_usage": true}}),
        ),
        case(
            "chat, streamed with logprobs",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("Say hello."), "max_tokens": 6, "temperature": 0,
                   "logprobs": true, "top_logprobs": 2, "stream": true}),
        ),
        case(
            "chat, streamed, two choices",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("Pick a number."), "max_tokens": 6, "temperature": 0,
                   "n": 2, "stream": true}),
        ),
        case(
            "chat, streamed tool call",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("What is the weather in Paris?"), "tools": weather_tool(),
                   "tool_choice": "required", "max_tokens": 40, "temperature": 0,
                   "stream": true}),
        ),
        case(
            "completion, streamed with logprobs and usage",
            "POST",
            "/v1/completions",
            json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
                   "logprobs": 2, "stream": true, "stream_options": {"include_usage": true}}),
        ),
        case(
            "completion, streamed, stopped by a stop string",
            "POST",
            "/v1/completions",
            json!({"prompt": "One, two, three,", "max_tokens": 16, "temperature": 0,
                   "stop": [","], "stream": true}),
        ),
        case(
            "bad input: streamed, temperature out of range",
            "POST",
            "/v1/completions",
            json!({"prompt": "x", "temperature": 9, "stream": true}),
        ),
        case(
            "completion, prompt_logprobs",
            "POST",
            "/v1/completions",
            json!({"prompt": "One, two, three, four", "max_tokens": 2, "temperature": 0,
                   "prompt_logprobs": 2}),
        ),
        case(
            "completion, echo and two prompts",
            "POST",
            "/v1/completions",
            json!({"prompt": ["Once upon a time", "In a galaxy"], "max_tokens": 6,
                   "temperature": 0, "echo": true}),
        ),
        case(
            "embeddings, one text",
            "POST",
            "/v1/embeddings",
            json!({"input": "The quick brown fox"}),
        ),
        case(
            "embeddings, texts and token ids",
            "POST",
            "/v1/embeddings",
            json!({"input": [[1, 2, 3, 4], [5, 6]]}),
        ),
        case(
            "embeddings, a token outside the vocabulary",
            "POST",
            "/v1/embeddings",
            json!({"input": [[1, 2, 999_999]]}),
        ),
        case(
            "embeddings, wrong dimensions",
            "POST",
            "/v1/embeddings",
            json!({"input": "hi", "dimensions": 3}),
        ),
        case(
            "anthropic messages, unknown model",
            "POST",
            "/v1/messages",
            json!({"model": "no-such-model", "max_tokens": 8, "messages": chat("Hi.")}),
        ),
        case(
            "tools, the model may call one",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("What is the weather in Paris?"), "tools": weather_tool(),
                   "max_tokens": 24, "temperature": 0}),
        ),
        case(
            "tools, a call is required",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("What is the weather in Paris?"), "tools": weather_tool(),
                   "tool_choice": "required", "max_tokens": 40, "temperature": 0}),
        ),
        case(
            "anthropic messages",
            "POST",
            "/v1/messages",
            json!({"model": model, "max_tokens": 8, "temperature": 0,
                   "messages": chat("Count to three.")}),
        ),
        case(
            "responses",
            "POST",
            "/v1/responses",
            json!({"input": "Say yes.", "max_output_tokens": 6, "temperature": 0,
                   "store": false}),
        ),
        case(
            "tgi generate",
            "POST",
            "/generate",
            json!({"inputs": "Hello, my name is", "parameters": {"max_new_tokens": 6}}),
        ),
        case(
            "tokenize",
            "POST",
            "/tokenize",
            json!({"inputs": "Hello world"}),
        ),
        case(
            "detokenize",
            "POST",
            "/detokenize",
            json!({"tokens": [1, 2, 3]}),
        ),
        case(
            "count tokens",
            "POST",
            "/v1/messages/count_tokens",
            json!({"model": model, "messages": chat("How many tokens is this?")}),
        ),
        case(
            "bad input: no messages",
            "POST",
            "/v1/chat/completions",
            json!({"max_tokens": 4}),
        ),
        case(
            "bad input: negative max_tokens",
            "POST",
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": -1}),
        ),
        case(
            "bad input: temperature out of range",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("x"), "temperature": 9}),
        ),
        case(
            "bad input: prompt too long",
            "POST",
            "/v1/completions",
            json!({"prompt": "word ".repeat(9000), "max_tokens": 4}),
        ),
        case(
            "bad input: broken regex",
            "POST",
            "/v1/chat/completions",
            json!({"messages": chat("x"), "guided_regex": "(unclosed"}),
        ),
        case(
            "bad input: not JSON",
            "POST",
            "/v1/chat/completions",
            Value::String("{not json".into()),
        ),
        case("unknown route", "POST", "/v1/nothing-here", json!({})),
        case("wrong method", "GET", "/v1/completions", Value::Null),
        case("model list", "GET", "/v1/models", Value::Null),
    ]
}

/// The answer of `host` to `c`: its status and its body, volatile fields removed (a body
/// that is not JSON is kept as a string).
fn answer(host: &str, c: &Case) -> (u16, Value) {
    // A string is sent as it is (not JSON), null as no body.
    let body = match &c.body {
        Value::Null => String::new(),
        Value::String(raw) => raw.clone(),
        b => b.to_string(),
    };
    let r =
        request(host, c.method, c.path, &body, LONG).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    let streamed = c.body["stream"] == json!(true) && r.status == 200;
    let mut value = match streamed {
        true => stream_content(&r.body).unwrap_or_else(|e| panic!("{}: {e}", c.name)),
        false => serde_json::from_str(&r.body).unwrap_or(Value::String(r.body.clone())),
    };
    strip(&mut value);
    (r.status, value)
}

/// What a client reads from an OpenAI event stream, whatever its chunk boundaries: per choice
/// the concatenated text (chat `delta.content`, completion `text`), the tool-call deltas'
/// names and arguments, the finish reason and the logprobs; the usage chunk; the distinct
/// chunk shapes in order of first appearance; and whether `[DONE]` ended it.
fn stream_content(body: &str) -> Result<Value, String> {
    let mut choices: std::collections::BTreeMap<u64, Value> = Default::default();
    let (mut shapes, mut usage, mut done) = (Vec::new(), Value::Null, false);
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if done {
            return Err(format!("an event after [DONE]: {data}"));
        }
        if data.trim() == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))?;
        let shape = shape_of(&chunk);
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
        for c in chunk["choices"].as_array().into_iter().flatten() {
            let index = c["index"].as_u64().ok_or("a choice without an index")?;
            let seen = choices.entry(index).or_insert_with(
                || json!({"text": "", "tool_calls": "", "finish_reason": null, "logprobs": []}),
            );
            fold_choice(seen, c);
        }
    }
    Ok(
        json!({"choices": choices.into_values().collect::<Vec<_>>(), "usage": usage,
              "shapes": shapes, "done": done}),
    )
}

/// Adds one chunk's choice `c` to what the client has of it so far.
fn fold_choice(seen: &mut Value, c: &Value) {
    let append = |seen: &mut Value, key: &str, more: &str| {
        let text = format!("{}{more}", seen[key].as_str().unwrap_or_default());
        seen[key] = Value::String(text);
    };
    let text = c["delta"]["content"].as_str().or(c["text"].as_str());
    append(seen, "text", text.unwrap_or_default());
    for call in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
        let f = &call["function"];
        let part = format!(
            "{}{}",
            f["name"].as_str().unwrap_or_default(),
            f["arguments"].as_str().unwrap_or_default()
        );
        append(seen, "tool_calls", &part);
    }
    if !c["finish_reason"].is_null() {
        seen["finish_reason"] = c["finish_reason"].clone();
    }
    let lp = &c["logprobs"];
    // Chat: `logprobs.content` entries; completions: parallel `tokens` / `token_logprobs`.
    let entries = match lp["content"].as_array() {
        Some(content) => content.clone(),
        None => lp["tokens"]
            .as_array()
            .into_iter()
            .flatten()
            .zip(lp["token_logprobs"].as_array().into_iter().flatten())
            .map(|(t, l)| json!([t, l]))
            .collect(),
    };
    if let Some(all) = seen["logprobs"].as_array_mut() {
        all.extend(entries);
    }
}

/// The shape of a chunk: its keys (volatile ones aside) with the type of each value; an
/// array's shape is the distinct shapes of its items.
fn shape_of(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !VOLATILE.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), shape_of(v)))
                .collect(),
        ),
        Value::Array(items) => {
            let mut shapes: Vec<Value> = Vec::new();
            for s in items.iter().map(shape_of) {
                if !shapes.contains(&s) {
                    shapes.push(s);
                }
            }
            Value::Array(shapes)
        }
        Value::String(_) => json!("string"),
        Value::Number(_) => json!("number"),
        Value::Bool(_) => json!("bool"),
        Value::Null => Value::Null,
    }
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for key in VOLATILE {
                map.remove(*key);
            }
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Where `a` and `b` differ (numbers within a relative 1e-4: one engine's float sums may be
/// grouped differently from another's batch), or `None`.
fn difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64()?, y.as_f64()?);
            let close = (x - y).abs() <= 1e-4 * x.abs().max(y.abs()).max(1.0);
            (!close).then(|| format!("{at}: {x} != {y}"))
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<_> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => difference(p, q, &format!("{at}.{k}")),
                _ => Some(format!("{at}.{k}: present on one side only")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| difference(p, q, &format!("{at}[{i}]"))),
        _ => (a != b).then(|| format!("{at}: {a} != {b}")),
    }
}

#[test]
fn the_api_suite_gets_the_same_answers_from_serve_and_from_a_gateway_of_two_workers() {
    // The worker's --tool-call-parser reaches the gateway through the model's descriptor.
    let parser = ["--tool-call-parser", "hermes"];
    let redis = Redis::start();
    let (_w1, _) = worker(&redis, "parity-1", &parser);
    let (_w2, _) = worker(&redis, "parity-2", &parser);
    let (_gw, fleet) = gateway(&redis, &[]);
    let (_serve, direct) = serve(&["--min-client-priority", "-10", parser[0], parser[1]]);
    wait_workers(&fleet, 2, LONG);
    wait_healthy(&direct, LONG);
    let models = request(&direct, "GET", "/v1/models", "", LONG)
        .unwrap()
        .json();
    let model = models["data"][0]["id"]
        .as_str()
        .expect("the model's name")
        .to_string();
    let mut statuses = Vec::new();
    let mut bodies = Vec::new();
    for c in cases(&model) {
        let (status, body) = answer(&direct, &c);
        let (fleet_status, fleet_body) = answer(&fleet, &c);
        assert_eq!(
            status, fleet_status,
            "{}: serve {status} {body}, gateway {fleet_status} {fleet_body}",
            c.name
        );
        if let Some(diff) = difference(&body, &fleet_body, "body") {
            panic!(
                "{}: the answers differ at {diff}\nserve:   {body}\ngateway: {fleet_body}",
                c.name
            );
        }
        statuses.push((c.name, status));
        bodies.push((c.name, body));
    }
    // The suite exercises what it claims: answers and refusals, not a wall of errors.
    let status_of = |name: &str| statuses.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
    for name in [
        "chat, greedy",
        "chat, streamed with usage",
        "chat, streamed tool call",
        "completion, streamed with logprobs and usage",
        "completion, prompt_logprobs",
        "anthropic messages",
        "tools, the model may call one",
        "embeddings, one text",
        "embeddings, texts and token ids",
        "tools, a call is required",
        "tgi generate",
        "model list",
    ] {
        assert_eq!(status_of(name), Some(200), "{name}");
    }
    // The streams carry what the one-piece answers do: the same greedy text, a finish reason,
    // usage when asked, logprobs when asked, and a closing [DONE].
    let body_of = |name: &str| {
        bodies
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| b.clone())
            .unwrap_or_default()
    };
    let (whole, streamed) = (
        body_of("chat, greedy"),
        body_of("chat, streamed with usage"),
    );
    assert_eq!(
        streamed["choices"][0]["text"], whole["choices"][0]["message"]["content"],
        "{streamed}"
    );
    assert_eq!(
        streamed["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"],
        "{streamed}"
    );
    assert_eq!(streamed["done"], json!(true), "{streamed}");
    assert!(
        streamed["usage"]["completion_tokens"].as_u64() > Some(0),
        "{streamed}"
    );
    let with_logprobs = body_of("completion, streamed with logprobs and usage");
    assert!(
        with_logprobs["choices"][0]["logprobs"]
            .as_array()
            .is_some_and(|l| !l.is_empty()),
        "{with_logprobs}"
    );
    let two = body_of("chat, streamed, two choices");
    assert_eq!(two["choices"].as_array().map(Vec::len), Some(2), "{two}");
    let call = body_of("chat, streamed tool call");
    assert!(
        call["choices"][0]["tool_calls"]
            .as_str()
            .is_some_and(|t| t.contains("get_weather")),
        "{call}"
    );

    // Run-time LoRA loading is the one route the fleet refuses (serve mounts it only with
    // --enable-runtime-lora): a 400 that says how the fleet gets adapters.
    let load = json!({"lora_name": "a", "lora_path": "/nonexistent"}).to_string();
    let r = request(&fleet, "POST", "/v1/load_lora_adapter", &load, LONG).unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    let message = r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("--lora-modules"), "{message}");
    for name in [
        "embeddings, a token outside the vocabulary",
        "bad input: no messages",
        "bad input: negative max_tokens",
        "bad input: broken regex",
        "bad input: not JSON",
        "bad input: streamed, temperature out of range",
    ] {
        let status = status_of(name).unwrap_or_default();
        assert!((400..500).contains(&status), "{name}: {status}");
    }
}
