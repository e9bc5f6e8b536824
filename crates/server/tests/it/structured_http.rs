//! Structured output over HTTP on the real default model (`KESTREL_DEFAULT_MODEL`): every
//! constraint field of the OpenAI and TGI routes yields text that satisfies it, bad
//! constraints are 400s naming their field (422 on TGI routes) before anything is queued, a free request batched
//! with constrained ones is unchanged, and nothing is left running or holding KV blocks.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokio::sync::RwLock;

/// The idle check takes this exclusively; the other tests share it.
static GATE: RwLock<()> = RwLock::const_new(());

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "pet": {"enum": ["cat", "dog", "fish"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}
        },
        "required": ["name", "age", "pet"],
        "additionalProperties": false
    })
}

/// Checks `text` against `person_schema` by hand: JSON, the required keys, their types, the
/// enum and the bounds, and no other keys.
fn assert_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {text}"));
    for key in obj.keys() {
        assert!(
            ["name", "age", "pet", "tags"].contains(&key.as_str()),
            "extra key {key}: {text}"
        );
    }
    let name = obj["name"]
        .as_str()
        .unwrap_or_else(|| panic!("name: {text}"));
    assert!(name.chars().count() <= 20, "{text}");
    let age = obj["age"].as_i64().unwrap_or_else(|| panic!("age: {text}"));
    assert!((0..=150).contains(&age), "{text}");
    let pet = obj["pet"].as_str().unwrap_or_else(|| panic!("pet: {text}"));
    assert!(["cat", "dog", "fish"].contains(&pet), "{text}");
    if let Some(tags) = obj.get("tags") {
        let tags = tags.as_array().unwrap_or_else(|| panic!("tags: {text}"));
        assert!(tags.len() <= 3, "{text}");
        assert!(
            tags.iter()
                .all(|t| t.as_str().is_some_and(|t| t.chars().count() <= 10)),
            "{text}"
        );
    }
}

/// Whether `text` matches `[A-Z][a-z]{1,15} [0-9]{1,3}` entirely.
fn matches_city_regex(text: &str) -> bool {
    let Some((word, number)) = text.split_once(' ') else {
        return false;
    };
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && (1..=15).contains(&chars.clone().count())
        && chars.all(|c| c.is_ascii_lowercase())
        && (1..=3).contains(&number.len())
        && number.chars().all(|c| c.is_ascii_digit())
}

const CITY_REGEX: &str = "[A-Z][a-z]{1,15} [0-9]{1,3}";

fn chat(content: &str, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 120,
        "temperature": 0
    });
    for (k, v) in extra.as_object().expect("object").clone() {
        body[k] = v;
    }
    body
}

fn completion(prompt: &str, extra: Value) -> Value {
    let mut body = json!({"prompt": prompt, "max_tokens": 120, "temperature": 0});
    for (k, v) in extra.as_object().expect("object").clone() {
        body[k] = v;
    }
    body
}

/// Text and finish reason of a chat response.
async fn chat_text(body: &Value) -> (String, String) {
    let (status, v) = post(main_server(), "/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{body} -> {v}");
    let choice = &v["choices"][0];
    (
        choice["message"]["content"]
            .as_str()
            .expect("content")
            .to_string(),
        choice["finish_reason"]
            .as_str()
            .expect("finish")
            .to_string(),
    )
}

/// Text and finish reason of a completion response.
async fn completion_text(body: &Value) -> (String, String) {
    let (status, v) = post(main_server(), "/v1/completions", body).await;
    assert_eq!(status, 200, "{body} -> {v}");
    let choice = &v["choices"][0];
    (
        choice["text"].as_str().expect("text").to_string(),
        choice["finish_reason"]
            .as_str()
            .expect("finish")
            .to_string(),
    )
}

#[tokio::test]
async fn json_schema_and_json_object_outputs_parse_and_validate() {
    let _g = GATE.read().await;
    let ask = "Describe a person with a name, an age and a pet as JSON.";
    let format = json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "person", "schema": person_schema(), "strict": true}}});
    let (text, finish) = chat_text(&chat(ask, format.clone())).await;
    assert_eq!(finish, "stop", "{text}");
    assert_person(&text);

    // Streamed, the same text arrives in pieces.
    let mut body = chat(ask, format);
    body["stream"] = json!(true);
    let payloads = stream(main_server(), "/v1/chat/completions", &body).await;
    let mut streamed = String::new();
    for p in payloads.iter().filter(|p| *p != "[DONE]") {
        let v: Value = serde_json::from_str(p).expect("chunk");
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            streamed.push_str(c);
        }
    }
    assert_eq!(streamed, text);

    // The same schema through vLLM's fields, on completions, as an object or its text.
    let prompt = "A person described as JSON:\n";
    for extra in [
        json!({"guided_json": person_schema()}),
        json!({"guided_json": person_schema().to_string()}),
        json!({"structured_outputs": {"json": person_schema()}}),
        // TGI's chat form, which huggingface_hub sends for a json_schema response_format.
        json!({"response_format": {"type": "json_object", "value": person_schema()}}),
        json!({"response_format": {"type": "json", "value": person_schema()}}),
    ] {
        let (text, finish) = completion_text(&completion(prompt, extra.clone())).await;
        assert_eq!(finish, "stop", "{extra}: {text}");
        assert_person(&text);
    }

    let ask_object = r#"Reply with JSON only, like {"color": "red"}. What color is the sky?"#;
    for body in [
        chat(
            ask_object,
            json!({"response_format": {"type": "json_object"}}),
        ),
        chat(
            ask_object,
            json!({"structured_outputs": {"json_object": true}}),
        ),
    ] {
        let (text, finish) = chat_text(&body).await;
        assert_eq!(finish, "stop", "{text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(v.is_object(), "{text}");
    }
    // An open prompt lets a small model fill any object until max_tokens (and where depends
    // on the CPU's kernels); this one asks for a short object.
    let ask_object_text = format!("{ask_object}\n");
    let body = completion(
        &ask_object_text,
        json!({"response_format": {"type": "json_object"}}),
    );
    let (text, finish) = completion_text(&body).await;
    assert_eq!(finish, "stop", "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(v.is_object(), "{text}");

    // `text` is no constraint at all.
    let free = chat("Say hello.", json!({"max_tokens": 8}));
    let texted = chat(
        "Say hello.",
        json!({"max_tokens": 8, "response_format": {"type": "text"}}),
    );
    assert_eq!(chat_text(&free).await, chat_text(&texted).await);
}

#[tokio::test]
async fn regex_choice_and_grammar_outputs_match() {
    let _g = GATE.read().await;
    let ask = "Name a city and how old it is in years.";
    for body in [
        chat(ask, json!({"guided_regex": CITY_REGEX})),
        chat(ask, json!({"structured_outputs": {"regex": CITY_REGEX}})),
        chat(
            ask,
            json!({"response_format": {"type": "regex", "value": CITY_REGEX}}),
        ),
        completion("City and age: ", json!({"guided_regex": CITY_REGEX})),
    ] {
        let text = if body.get("prompt").is_some() {
            completion_text(&body).await.0
        } else {
            chat_text(&body).await.0
        };
        assert!(matches_city_regex(&text), "{body}: {text:?}");
    }

    let choices = ["positive", "negative", "neutral"];
    let ask = "Is the review 'I love it' positive, negative or neutral?";
    for body in [
        chat(ask, json!({"guided_choice": choices})),
        chat(ask, json!({"structured_outputs": {"choice": choices}})),
    ] {
        let (text, finish) = chat_text(&body).await;
        assert_eq!(finish, "stop");
        assert!(choices.contains(&text.as_str()), "{text:?}");
    }
    let (text, _) = completion_text(&completion(
        "Answer: ",
        json!({"guided_choice": ["left", "right"]}),
    ))
    .await;
    assert!(["left", "right"].contains(&text.as_str()), "{text:?}");

    let grammar = "start: answer \" \" number\nanswer: \"yes\" | \"no\"\nnumber: /[0-9]{1,2}/";
    for body in [
        chat(
            "Answer yes or no and give a number.",
            json!({"guided_grammar": grammar}),
        ),
        chat(
            "Answer yes or no and give a number.",
            json!({"structured_outputs": {"grammar": grammar}}),
        ),
    ] {
        let (text, finish) = chat_text(&body).await;
        assert_eq!(finish, "stop", "{text}");
        let (answer, number) = text.split_once(' ').unwrap_or_else(|| panic!("{text:?}"));
        assert!(["yes", "no"].contains(&answer), "{text:?}");
        assert!(
            (1..=2).contains(&number.len()) && number.chars().all(|c| c.is_ascii_digit()),
            "{text:?}"
        );
    }
}

#[tokio::test]
async fn tgi_grammar_json_and_regex() {
    let _g = GATE.read().await;
    let s = main_server();
    for grammar in [
        json!({"type": "json", "value": person_schema()}),
        json!({"type": "json_schema", "value": {"name": "person", "schema": person_schema()}}),
    ] {
        let body = json!({"inputs": "A person described as JSON:\n",
            "parameters": {"max_new_tokens": 120, "grammar": grammar, "details": true}});
        let (status, v) = post(s, "/generate", &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["details"]["finish_reason"], "eos_token", "{v}");
        assert_person(v["generated_text"].as_str().expect("text"));
    }
    let body = json!({"inputs": "City and age: ",
        "parameters": {"max_new_tokens": 40, "grammar": {"type": "regex", "value": CITY_REGEX}}});
    let (status, v) = post(s, "/generate", &body).await;
    assert_eq!(status, 200, "{v}");
    let text = v["generated_text"].as_str().expect("text");
    assert!(matches_city_regex(text), "{text:?}");
}

#[tokio::test]
async fn bad_constraints_are_400s_naming_the_field() {
    let _g = GATE.read().await;
    let s = main_server();
    let cases = [
        (
            "/v1/chat/completions",
            chat(
                "hi",
                json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}}}),
            ),
            "response_format",
        ),
        (
            "/v1/chat/completions",
            chat(
                "hi",
                json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "x"}}}),
            ),
            "response_format",
        ),
        (
            "/v1/chat/completions",
            chat("hi", json!({"response_format": {"type": "yaml"}})),
            "response_format",
        ),
        (
            "/v1/chat/completions",
            chat(
                "hi",
                json!({"response_format": {"type": "regex", "value": 3}}),
            ),
            "response_format",
        ),
        (
            "/v1/chat/completions",
            chat("hi", json!({"response_format": {"type": "json"}})),
            "response_format",
        ),
        (
            "/v1/completions",
            completion("hi", json!({"guided_regex": "(unclosed"})),
            "guided_regex",
        ),
        (
            "/v1/completions",
            completion("hi", json!({"guided_json": "{not json"})),
            "guided_json",
        ),
        (
            "/v1/completions",
            completion("hi", json!({"guided_json": 7})),
            "guided_json",
        ),
        (
            "/v1/completions",
            completion("hi", json!({"guided_choice": []})),
            "guided_choice",
        ),
        (
            "/v1/completions",
            completion("hi", json!({"guided_grammar": "start: missing_rule"})),
            "guided_grammar",
        ),
        (
            "/v1/completions",
            completion("hi", json!({"structured_outputs": {}})),
            "structured_outputs",
        ),
        (
            "/v1/completions",
            completion(
                "hi",
                json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}),
            ),
            "structured_outputs",
        ),
        (
            "/v1/completions",
            completion("hi", json!({"guided_regex": "a+", "guided_choice": ["a"]})),
            "guided_choice",
        ),
        (
            "/v1/chat/completions",
            chat(
                "hi",
                json!({"response_format": {"type": "json_object"}, "guided_regex": "a"}),
            ),
            "guided_regex",
        ),
        (
            "/generate",
            json!({"inputs": "hi", "parameters": {"grammar": {"type": "regex", "value": "[z-a]"}}}),
            "grammar",
        ),
        (
            "/generate",
            json!({"inputs": "hi", "parameters": {"grammar": {"type": "json", "value": {"type": 12}}}}),
            "grammar",
        ),
        (
            "/generate",
            json!({"inputs": "hi", "parameters": {"grammar": {"type": "cfg", "value": "x"}}}),
            "grammar",
        ),
    ];
    for (path, body, param) in cases {
        let (status, v) = post(s, path, &body).await;
        // TGI reports validation errors as 422, OpenAI routes as 400.
        let expected = if path == "/generate" { 422 } else { 400 };
        assert_eq!(status, expected, "{body} -> {v}");
        let message = v["error"]["message"]
            .as_str()
            .or(v["error"].as_str())
            .unwrap_or_default();
        assert!(!message.is_empty(), "{v}");
        if path != "/generate" {
            assert_eq!(v["error"]["param"], param, "{body} -> {v}");
        } else {
            assert!(
                message.contains(param) || message.contains("regex") || message.contains("JSON"),
                "{v}"
            );
        }
    }
}

#[tokio::test]
async fn free_request_beside_constrained_ones_is_unchanged_and_nothing_leaks() {
    let _g = GATE.write().await;
    let s = main_server();
    let free = completion(
        "The history of the lighthouse begins",
        json!({"max_tokens": 48}),
    );
    let (alone, _) = completion_text(&free).await;

    let constrained = [
        chat(
            "Describe a person as JSON.",
            json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "p", "schema": person_schema()}}}),
        ),
        chat("Name a city.", json!({"guided_regex": CITY_REGEX})),
        chat(
            r#"Reply with JSON only, like {"color": "red"}. What color is grass?"#,
            json!({"response_format": {"type": "json_object"}}),
        ),
        chat(
            "Pick one.",
            json!({"guided_choice": ["red", "green", "blue"]}),
        ),
    ];
    let mut tasks = Vec::new();
    for body in constrained {
        tasks.push(tokio::spawn(async move { chat_text(&body).await }));
    }
    let batched = tokio::spawn(async move { completion_text(&free).await });
    let (batched, _) = batched.await.expect("task");
    let outs: Vec<(String, String)> = futures_join(tasks).await;
    assert_eq!(
        batched, alone,
        "a free request is unchanged by constrained neighbours"
    );
    assert_person(&outs[0].0);
    assert!(matches_city_regex(&outs[1].0), "{:?}", outs[1]);
    assert!(
        serde_json::from_str::<Value>(&outs[2].0).is_ok_and(|v| v.is_object()),
        "{:?}",
        outs[2]
    );
    assert!(
        ["red", "green", "blue"].contains(&outs[3].0.as_str()),
        "{:?}",
        outs[3]
    );

    // A constrained stream dropped mid-way is aborted like any other.
    let mut body = chat(
        "Describe a person as JSON.",
        json!({"response_format": {"type": "json_object"},
        "max_tokens": 400, "stream": true}),
    );
    body["max_tokens"] = json!(400);
    let mut resp = client()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.chunk().await.expect("chunk").is_some());
    drop(resp);

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, m) = get(s, "/metrics").await;
        let running = metric(&m, "kestrel:num_requests_running").expect("running gauge");
        let waiting = metric(&m, "kestrel:num_requests_waiting").unwrap_or(0.0);
        let usage = metric(&m, "kestrel:kv_cache_usage_perc").expect("kv usage");
        if running == 0.0 && waiting == 0.0 && usage == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "engine not idle after constrained requests: running {running}, waiting {waiting}, kv {usage}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn futures_join<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}
