//! HTTP tests on the real default model (`KESTREL_DEFAULT_MODEL`): OpenAI and TGI routes,
//! streaming vs non-streaming, batching invariance, prefix caching, limits, auth, metrics.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokio::sync::RwLock;

/// Timing-sensitive tests take this exclusively; the rest share it.
static GATE: RwLock<()> = RwLock::const_new(());

fn chat_body(messages: Value, max_tokens: usize, stream: bool) -> Value {
    json!({"messages": messages, "max_tokens": max_tokens, "temperature": 0,
           "stream": stream, "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }})
}

fn text_of_completion_chunks(payloads: &[String]) -> (String, Option<String>, Option<Value>) {
    let mut text = String::new();
    let (mut finish, mut usage) = (None, None);
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    for p in &payloads[..payloads.len() - 1] {
        let v: Value = serde_json::from_str(p).expect("chunk JSON");
        assert_eq!(v["object"], "text_completion");
        if let Some(c) = v["choices"].as_array().and_then(|c| c.first()) {
            text.push_str(c["text"].as_str().expect("text"));
            if let Some(f) = c["finish_reason"].as_str() {
                finish = Some(f.to_string());
            }
        } else {
            usage = Some(v["usage"].clone());
        }
    }
    (text, finish, usage)
}

#[tokio::test]
async fn completions_stream_equals_non_stream() {
    let _g = GATE.read().await;
    let s = main_server();
    let body = json!({"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0});
    let (status, full) = post(s, "/v1/completions", &body).await;
    assert_eq!(status, 200, "{full}");
    assert_eq!(full["object"], "text_completion");
    let text = full["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(!text.is_empty());
    let usage = &full["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );

    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let payloads = stream(s, "/v1/completions", &sbody).await;
    let (streamed, finish, susage) = text_of_completion_chunks(&payloads);
    assert_eq!(
        streamed, text,
        "streamed text must equal the non-streamed text (greedy)"
    );
    assert_eq!(
        finish.as_deref(),
        full["choices"][0]["finish_reason"].as_str()
    );
    let susage = susage.expect("a usage chunk with include_usage");
    assert_eq!(susage["completion_tokens"], usage["completion_tokens"]);
    assert_eq!(susage["prompt_tokens"], usage["prompt_tokens"]);
}

#[tokio::test]
async fn chat_stream_equals_non_stream() {
    let _g = GATE.read().await;
    let s = main_server();
    let messages = json!([{"role": "system", "content": "You are terse."},
                          {"role": "user", "content": "Name three colors."}]);
    let (status, full) = post(
        s,
        "/v1/chat/completions",
        &chat_body(messages.clone(), 16, false),
    )
    .await;
    assert_eq!(status, 200, "{full}");
    assert_eq!(full["object"], "chat.completion");
    assert_eq!(full["choices"][0]["message"]["role"], "assistant");
    let text = full["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string();
    assert!(!text.is_empty());

    let payloads = stream(s, "/v1/chat/completions", &chat_body(messages, 16, true)).await;
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).expect("chunk JSON"))
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut streamed = String::new();
    let mut finish = None;
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        if let Some(choice) = c["choices"].as_array().and_then(|a| a.first()) {
            streamed.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            if let Some(f) = choice["finish_reason"].as_str() {
                finish = Some(f.to_string());
            }
            assert!(c["usage"].is_null(), "usage is null before the last chunk");
        }
    }
    assert_eq!(streamed, text);
    assert_eq!(
        finish.as_deref(),
        full["choices"][0]["finish_reason"].as_str()
    );
    let last = chunks.last().expect("chunks");
    assert_eq!(last["choices"].as_array().map(Vec::len), Some(0));
    assert_eq!(
        last["usage"]["completion_tokens"],
        full["usage"]["completion_tokens"]
    );
}

#[tokio::test]
async fn tgi_stream_equals_generate() {
    let _g = GATE.read().await;
    let s = main_server();
    let body = json!({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 10, "details": true}});
    let (status, full) = post(s, "/generate", &body).await;
    assert_eq!(status, 200, "{full}");
    let text = full["generated_text"]
        .as_str()
        .expect("generated_text")
        .to_string();
    assert_eq!(full["details"]["generated_tokens"].as_u64(), Some(10));
    assert_eq!(full["details"]["finish_reason"], "length");

    let payloads = stream(s, "/generate_stream", &body).await;
    assert_eq!(payloads.len(), 10, "one event per token: {payloads:?}");
    let events: Vec<Value> = payloads
        .iter()
        .map(|p| serde_json::from_str(p).expect("JSON"))
        .collect();
    let joined: String = events
        .iter()
        .map(|e| e["token"]["text"].as_str().expect("text"))
        .collect();
    assert_eq!(joined, text);
    for e in &events[..9] {
        assert!(e["generated_text"].is_null());
        assert!(e["token"]["logprob"].as_f64().expect("logprob") <= 0.0);
    }
    assert_eq!(events[9]["generated_text"].as_str(), Some(text.as_str()));
    assert_eq!(events[9]["details"]["generated_tokens"].as_u64(), Some(10));

    // TGI's root route answers like /generate, or like /generate_stream when asked to stream.
    let (status, root) = post(s, "/", &body).await;
    assert_eq!(status, 200, "{root}");
    assert_eq!(root["generated_text"].as_str(), Some(text.as_str()));
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let root_events = stream(s, "/", &streaming).await;
    assert_eq!(root_events, payloads);
    let invalid = json!({"inputs": "x", "parameters": {"temperature": 0}});
    let (status, bad) = post(s, "/", &invalid).await;
    assert_eq!(status, 422, "{bad}");
    assert_eq!(bad["error_type"], "validation");
}

#[tokio::test]
async fn concurrent_requests_equal_sequential() {
    let _g = GATE.read().await;
    let s = main_server();
    let bodies: Vec<Value> = (0..16)
        .map(|i| {
            let prompt = format!(
                "{} Here is fact number {i}:",
                "The quick brown fox jumps. ".repeat(i % 5 + 1)
            );
            json!({"prompt": prompt, "max_tokens": 4 + i % 7, "temperature": 0, "ignore_eos": true})
        })
        .collect();
    let mut sequential = Vec::new();
    for b in &bodies {
        let (status, v) = post(s, "/v1/completions", b).await;
        assert_eq!(status, 200, "{v}");
        sequential.push(v["choices"][0]["text"].as_str().expect("text").to_string());
    }
    let handles: Vec<_> = bodies
        .iter()
        .map(|b| {
            let b = b.clone();
            tokio::spawn(async move { post(main_server(), "/v1/completions", &b).await })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let (status, v) = h.await.expect("join");
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            v["choices"][0]["text"].as_str(),
            Some(sequential[i].as_str()),
            "request {i}"
        );
        assert_eq!(
            v["usage"]["completion_tokens"].as_u64(),
            Some(4 + i as u64 % 7)
        );
    }
}

/// Time to the first streamed body chunk.
async fn ttft(body: &Value) -> Duration {
    let start = Instant::now();
    let mut resp = client()
        .post(format!("{}/v1/chat/completions", main_server().base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    let first = resp.chunk().await.expect("chunk");
    assert!(first.is_some());
    let t = start.elapsed();
    while resp.chunk().await.expect("chunk").is_some() {}
    t
}

#[tokio::test]
async fn second_turn_hits_prefix_cache() {
    let _g = GATE.write().await;
    let s = main_server();
    let nonce = format!("{:?}", Instant::now());
    let system = format!("Session {nonce}. {}", "You are a helpful assistant who answers questions about geography, history and science in detail. ".repeat(20));
    let turn1 = json!([{"role": "system", "content": system}, {"role": "user", "content": "What is the tallest mountain?"}]);
    let (_, m0) = get(s, "/metrics").await;
    let hits0 = metric(&m0, "kestrel:prefix_cache_hits_total").unwrap_or(0.0);
    let t1 = ttft(&chat_body(turn1.clone(), 4, true)).await;
    let (status, first) = post(s, "/v1/chat/completions", &chat_body(turn1, 8, false)).await;
    assert_eq!(status, 200);
    let reply = first["choices"][0]["message"]["content"]
        .as_str()
        .expect("reply")
        .to_string();
    let turn2 = json!([{"role": "system", "content": system}, {"role": "user", "content": "What is the tallest mountain?"},
                       {"role": "assistant", "content": reply}, {"role": "user", "content": "And the longest river?"}]);
    let t2 = ttft(&chat_body(turn2.clone(), 4, true)).await;
    let (status, second) = post(s, "/v1/chat/completions", &chat_body(turn2, 4, false)).await;
    assert_eq!(status, 200);
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens");
    let prompt = second["usage"]["prompt_tokens"]
        .as_u64()
        .expect("prompt_tokens");
    assert!(
        cached >= 256 && cached < prompt,
        "cached {cached} of {prompt} prompt tokens"
    );
    let (_, m1) = get(s, "/metrics").await;
    let hits1 = metric(&m1, "kestrel:prefix_cache_hits_total").expect("prefix cache hits metric");
    assert!(
        hits1 >= hits0 + 256.0,
        "prefix cache hits {hits0} -> {hits1}"
    );
    assert!(
        t2 < t1,
        "second turn TTFT {t2:?} should beat the first {t1:?}"
    );
}

#[tokio::test]
async fn bad_requests_get_clear_4xx() {
    let _g = GATE.read().await;
    let s = main_server();
    let (status, text) = post_raw(s, "/v1/completions", b"{\"prompt\": \"hi\",".to_vec()).await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).expect("error JSON");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("JSON"),
        "{text}"
    );

    let (status, text) =
        post_raw(s, "/v1/completions", b"{\"prompt\": \"\xff\xfe\"}".to_vec()).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("UTF-8"), "{text}");

    let cases = [
        (json!({"prompt": "hi", "max_tokens": -5}), "max_tokens"),
        (json!({"prompt": "hi", "temperature": 2.5}), "temperature"),
        (json!({"prompt": "hi", "temperature": -0.1}), "temperature"),
        (json!({"prompt": "hi", "n": 0}), "n"),
        (json!({"prompt": "hi", "n": 17}), "n"),
        (json!({"prompt": "hi", "top_p": 0}), "top_p"),
        (json!({"prompt": "hi", "top_p": 1.5}), "top_p"),
        (
            json!({"prompt": "hi", "presence_penalty": 9}),
            "presence_penalty",
        ),
        (json!({"prompt": "hi", "logprobs": 50}), "logprobs"),
        (json!({"prompt": "hi", "stop": [""]}), "stop"),
        (json!({"prompt": [1, 2, 999999999]}), "prompt"),
    ];
    for (body, param) in cases {
        let (status, v) = post(s, "/v1/completions", &body).await;
        assert_eq!(status, 400, "{body} -> {v}");
        assert_eq!(v["error"]["param"], param, "{body} -> {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(param),
            "{v}"
        );
    }
    // Unknown fields are ignored by default (tests/openai_surface.rs covers `--strict-api`).
    let (status, v) = post(
        s,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 1, "frobnicate": 1}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(
        s,
        "/v1/chat/completions",
        &json!({"messages": [], "max_tokens": 4}),
    )
    .await;
    assert_eq!(status, 400, "{v}");

    let long = "word ".repeat(2000);
    let (status, v) = post(
        s,
        "/v1/completions",
        &json!({"prompt": long, "max_tokens": 4}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("1536"),
        "{v}"
    );
    let (status, v) = post(
        s,
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 5000}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("2048"),
        "{v}"
    );
    let (status, v) = post(s, "/generate", &json!({"inputs": long})).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["error_type"], "validation");
    let (status, v) = post(
        s,
        "/generate",
        &json!({"inputs": "hi", "parameters": {"temperature": 0}}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
}

#[tokio::test]
async fn api_key_and_body_limit() {
    let s = keyed_server();
    let models = format!("{}/v1/models", s.base);
    let resp = client().get(&models).send().await.expect("send");
    assert_eq!(resp.status().as_u16(), 401);
    let v: Value = serde_json::from_str(&resp.text().await.unwrap()).expect("JSON");
    assert_eq!(v["error"]["type"], "authentication_error");
    for header in [
        format!("Bearer {KEY}x"),
        format!("bearer {KEY}"),
        KEY.to_string(),
        "Bearer ".into(),
    ] {
        let resp = client()
            .get(&models)
            .header("authorization", header.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 401, "{header}");
    }
    let resp = client()
        .get(&models)
        .header("authorization", format!("Bearer {KEY}"))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(get(s, "/health").await.0, 200);
    assert_eq!(get(s, "/metrics").await.0, 200);
    let big = json!({"prompt": "x".repeat(100 * 1024)}).to_string();
    let resp = client()
        .post(format!("{}/v1/completions", s.base))
        .header("authorization", format!("Bearer {KEY}"))
        .body(big)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 413);
}

#[tokio::test]
async fn overload_then_disconnect_returns_to_idle() {
    let s = small_server();
    let body = json!({"prompt": "Count forever:", "max_tokens": 400, "ignore_eos": true, "stream": true, "temperature": 0});
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut resp = client()
            .post(format!("{}/v1/completions", s.base))
            .body(body.to_string())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 200);
        assert!(resp.chunk().await.expect("chunk").is_some());
        open.push(resp);
    }
    let (status, v) = post(
        s,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let (_, m) = get(s, "/metrics").await;
    assert!(metric(&m, "kestrel:kv_cache_usage_perc").expect("kv usage") > 0.0);
    drop(open);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, m) = get(s, "/metrics").await;
        let running = metric(&m, "kestrel:num_requests_running").expect("running gauge");
        let usage = metric(&m, "kestrel:kv_cache_usage_perc").expect("kv usage");
        if running == 0.0 && usage == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "engine not idle after disconnect: running {running}, kv {usage}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, v) = post(
        s,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn metrics_openapi_and_info_routes() {
    let _g = GATE.read().await;
    let s = main_server();
    let (status, _) = post(
        s,
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, m) = get(s, "/metrics").await;
    assert_eq!(status, 200);
    for name in [
        "kestrel:http_requests_total{",
        "kestrel:num_requests_running",
        "kestrel:kv_cache_usage_perc",
        "kestrel:generation_tokens_total",
        "kestrel:time_to_first_token_seconds_bucket{le=",
        "kestrel:kv_num_blocks",
        "kestrel:kv_free_blocks",
    ] {
        assert!(m.contains(name), "missing {name} in /metrics:\n{m}");
    }
    assert!(
        m.contains(r#"kestrel:http_requests_total{route="/v1/completions",status="200"}"#),
        "{m}"
    );
    // The process set, read from the OS: this test process has memory, threads and files.
    let value = |name: &str| -> f64 {
        let line = m.lines().find(|l| l.split(' ').next() == Some(name));
        let line = line.unwrap_or_else(|| panic!("missing {name} in /metrics:\n{m}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_threads") >= 2.0);
    assert!(value("process_open_fds") >= 3.0);
    // A counter of whole seconds (the collector's counter holds integers).
    assert!(value("process_cpu_seconds_total") >= 0.0);
    assert!(value("process_start_time_seconds") > 1.7e9);
    // The inference threads worked on the completion.
    assert!(value("kestrel:inference_pool_busy_seconds") > 0.0);
    assert!(value("kestrel:inference_pool_threads") >= 1.0);
    // The heap as the allocator reports it, and the KV cache's share no sequence reads.
    let (held, live) = (
        value("kestrel:heap_held_bytes"),
        value("kestrel:heap_live_bytes"),
    );
    assert!(held >= live && live > 1e5, "held {held}, live {live}");
    let frag = value("kestrel:heap_fragmentation_perc");
    assert!(
        (frag - (held - live) / held).abs() < 0.05,
        "{frag} vs {held} {live}"
    );
    let kv_frag = value("kestrel:kv_cache_fragmentation_perc");
    assert!((0.0..=1.0).contains(&kv_frag), "{kv_frag}");
    for line in m.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        assert!(
            value.parse::<f64>().is_ok() || value == "+Inf",
            "bad value in {line:?}"
        );
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name {name:?}"
        );
    }
    let (status, doc) = get(s, "/openapi.json").await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&doc).expect("openapi JSON");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for p in [
        "/v1/completions",
        "/v1/chat/completions",
        "/generate",
        "/generate_stream",
        "/",
        "/health",
    ] {
        assert!(doc["paths"][p].is_object(), "missing path {p}");
    }
    let (status, models) = get(s, "/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["max_model_len"].as_u64(), Some(2048));
    let (status, info) = get(s, "/info").await;
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["max_input_tokens"].as_u64(), Some(1536));
    let (status, toks) = post(s, "/tokenize", &json!({"inputs": "Hello world"})).await;
    assert_eq!(status, 200);
    assert!(toks.as_array().is_some_and(|t| !t.is_empty()));
    let (status, health) = get(s, "/health").await;
    assert_eq!(status, 200, "{health}");
}

#[tokio::test]
async fn n_choices_and_logprobs() {
    let _g = GATE.read().await;
    let s = main_server();
    let body =
        json!({"prompt": "1, 2, 3,", "max_tokens": 3, "n": 2, "temperature": 0, "logprobs": 2});
    let (status, v) = post(s, "/v1/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2);
    assert_eq!(
        choices[0]["text"], choices[1]["text"],
        "greedy choices agree"
    );
    let lp = &choices[0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(3));
    assert!(lp["token_logprobs"][0].as_f64().unwrap() <= 0.0);
    assert_eq!(lp["top_logprobs"][0].as_object().map(|o| o.len()), Some(2));
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0,
                      "logprobs": true, "top_logprobs": 3});
    let (status, v) = post(s, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{v}");
    let content = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("logprobs content");
    assert_eq!(content.len(), 3);
    assert_eq!(content[0]["top_logprobs"].as_array().map(Vec::len), Some(3));
}
