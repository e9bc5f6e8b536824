//! HTTP tests of the OpenAI/vLLM request surface on the real default model
//! (`KESTREL_DEFAULT_MODEL`): unknown fields and `--strict-api`, `logit_bias`, `min_tokens`,
//! `stop_token_ids`, `include_stop_str_in_output`, `skip_special_tokens`, response ids and
//! `system_fingerprint`, lists of prompts, `n` with streaming, `echo`, `best_of`, `priority`,
//! `prompt_logprobs`.

use crate::common;

use std::collections::HashMap;

use common::*;
use serde_json::{json, Value};

const COUNT: &str = "1, 2, 3,";

/// Token ids of `text` without special tokens, via `/tokenize`.
async fn ids(s: &Server, text: &str) -> Vec<(u64, String)> {
    let (status, v) = post(
        s,
        "/tokenize",
        &json!({"inputs": text, "add_special_tokens": false}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    v.as_array()
        .expect("token list")
        .iter()
        .map(|t| {
            (
                t["id"].as_u64().expect("id"),
                t["text"].as_str().expect("text").to_string(),
            )
        })
        .collect()
}

async fn completion(s: &Server, body: Value) -> Value {
    let (status, v) = post(s, "/v1/completions", &body).await;
    assert_eq!(status, 200, "{body} -> {v}");
    v
}

async fn refused(s: &Server, path: &str, body: Value, param: &str) -> Value {
    let (status, v) = post(s, path, &body).await;
    assert_eq!(status, 400, "{body} -> {v}");
    assert_eq!(v["error"]["param"], param, "{body} -> {v}");
    v
}

fn text(v: &Value, i: usize) -> String {
    v["choices"][i]["text"].as_str().expect("text").to_string()
}

#[tokio::test]
async fn unknown_fields_are_ignored_unless_strict() {
    let body = json!({"prompt": "hi", "max_tokens": 1, "frobnicate": 1, "vendor_x": {"a": 1}});
    completion(main_server(), body.clone()).await;
    let chat = json!({"messages": [{"role": "user", "content": "Hi", "extra": 1}],
                      "max_tokens": 1, "guided_whatever": true});
    let (status, v) = post(main_server(), "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{v}");

    let strict = strict_server();
    let v = refused(strict, "/v1/completions", body, "frobnicate").await;
    let message = v["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("frobnicate") && message.contains("vendor_x"),
        "{v}"
    );
    refused(strict, "/v1/chat/completions", chat, "guided_whatever").await;
    let (status, v) = post(
        strict,
        "/generate",
        &json!({"inputs": "hi", "parameters": {"max_new_tokens": 1}, "frob": 2}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("frob")),
        "{v}"
    );
    // Known fields still work on the strict server.
    completion(strict, json!({"prompt": "hi", "max_tokens": 1})).await;
}

#[tokio::test]
async fn logit_bias_forces_and_bans_tokens() {
    let s = main_server();
    let banana = ids(s, " banana").await;
    let (forced, piece) = banana[0].clone();
    let v = completion(
        s,
        json!({"prompt": COUNT, "max_tokens": 3, "temperature": 0,
               "logit_bias": {forced.to_string(): 100}}),
    )
    .await;
    assert_eq!(text(&v, 0), piece.repeat(3), "{v}");

    let base = completion(
        s,
        json!({"prompt": COUNT, "max_tokens": 1, "temperature": 0}),
    )
    .await;
    let first = ids(s, &text(&base, 0)).await[0].0;
    let v = completion(
        s,
        json!({"prompt": COUNT, "max_tokens": 1, "temperature": 0,
               "logit_bias": {first.to_string(): -100}}),
    )
    .await;
    assert_ne!(
        text(&v, 0),
        text(&base, 0),
        "the banned token came back: {v}"
    );

    for bias in [
        json!({"abc": 1}),
        json!({"999999999": 1}),
        json!({"5": 100.5}),
        json!({"5": -101}),
    ] {
        let body = json!({"prompt": "hi", "logit_bias": bias});
        let v = refused(s, "/v1/completions", body, "logit_bias").await;
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("logit_bias"),
            "{v}"
        );
    }
}

#[tokio::test]
async fn stop_token_ids_min_tokens_and_include_stop_str() {
    let s = main_server();
    let base = completion(
        s,
        json!({"prompt": COUNT, "max_tokens": 6, "temperature": 0}),
    )
    .await;
    let base_text = text(&base, 0);
    assert!(base_text.starts_with(" 4,"), "{base}");
    let comma = ids(s, ",").await[0].0;

    // The comma after " 4" ends the text (its own text kept, as for any stop token).
    let body = json!({"prompt": COUNT, "max_tokens": 6, "temperature": 0,
                      "stop_token_ids": [comma]});
    let v = completion(s, body.clone()).await;
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    // " ", "4", ",": digits are single tokens.
    assert_eq!(v["usage"]["completion_tokens"], 3, "{v}");
    assert_eq!(text(&v, 0), " 4,");
    let chat = json!({"messages": [{"role": "user", "content": "Count: 1, 2, 3"}],
                      "max_tokens": 12, "temperature": 0, "stop_token_ids": [comma], "min_tokens": 1});
    let (status, v) = post(s, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{v}");

    // min_tokens: the comma cannot be sampled before 4 tokens (greedy would pick it third).
    let v = completion(
        s,
        json!({"prompt": COUNT, "max_tokens": 10, "temperature": 0, "logprobs": 0,
               "stop_token_ids": [comma], "min_tokens": 4}),
    )
    .await;
    let tokens = v["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .expect("tokens");
    assert!(tokens.len() >= 5, "{v}");
    assert!(tokens[..4].iter().all(|t| t != ","), "{v}");

    // Stop strings: cut before the stop, or kept with include_stop_str_in_output.
    let cut = completion(
        s,
        json!({"prompt": COUNT, "max_tokens": 6, "temperature": 0, "stop": " 5"}),
    )
    .await;
    assert_eq!(text(&cut, 0), " 4,");
    let kept = completion(
        s,
        json!({"prompt": COUNT, "max_tokens": 6, "temperature": 0, "stop": " 5",
               "include_stop_str_in_output": true}),
    )
    .await;
    assert_eq!(text(&kept, 0), " 4, 5");
    refused(
        s,
        "/v1/completions",
        json!({"prompt": "hi", "stop_token_ids": [-1]}),
        "stop_token_ids",
    )
    .await;
    refused(
        s,
        "/v1/completions",
        json!({"prompt": "hi", "min_tokens": -2}),
        "min_tokens",
    )
    .await;
}

#[tokio::test]
async fn skip_special_tokens_false_keeps_the_eos_text() {
    let s = main_server();
    let chat = |skip: bool| {
        json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 64,
               "temperature": 0, "skip_special_tokens": skip})
    };
    let (status, skipped) = post(s, "/v1/chat/completions", &chat(true)).await;
    assert_eq!(status, 200, "{skipped}");
    assert_eq!(skipped["choices"][0]["finish_reason"], "stop", "{skipped}");
    let (status, kept) = post(s, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(status, 200, "{kept}");
    let skipped = skipped["choices"][0]["message"]["content"]
        .as_str()
        .unwrap();
    let kept = kept["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!skipped.contains("<|im_end|>"), "{skipped:?}");
    assert_eq!(kept, format!("{skipped}<|im_end|>"));
}

#[tokio::test]
async fn ids_are_random_and_responses_carry_a_fingerprint() {
    let s = main_server();
    let body = json!({"prompt": "hi", "max_tokens": 1});
    let a = completion(s, body.clone()).await;
    let b = completion(s, body.clone()).await;
    let (ida, idb) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    assert_ne!(ida, idb);
    let hex = ida.strip_prefix("cmpl-").expect("cmpl- prefix");
    assert!(
        hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{ida}"
    );
    let fp = a["system_fingerprint"].as_str().expect("fingerprint");
    assert!(fp.starts_with("fp_kestrel_"), "{fp}");
    assert_eq!(b["system_fingerprint"], fp);
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1});
    let (_, c) = post(s, "/v1/chat/completions", &chat).await;
    assert!(c["id"].as_str().unwrap().starts_with("chatcmpl-"), "{c}");
    assert_eq!(c["system_fingerprint"], fp);
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    for p in stream(s, "/v1/chat/completions", &streamed).await {
        if p != "[DONE]" {
            let chunk: Value = serde_json::from_str(&p).unwrap();
            assert_eq!(chunk["system_fingerprint"], fp, "{chunk}");
        }
    }
}

#[tokio::test]
async fn lists_of_prompts_give_choices_in_prompt_order() {
    let s = main_server();
    let one = |p: Value| json!({"prompt": p, "max_tokens": 4, "temperature": 0});
    let a = text(&completion(s, one(json!("Hello"))).await, 0);
    let b = text(&completion(s, one(json!(COUNT))).await, 0);
    let mut body = one(json!(["Hello", COUNT]));
    body["n"] = json!(2);
    let v = completion(s, body).await;
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 4, "{v}");
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(
            c["text"].as_str(),
            Some(if i < 2 { a.as_str() } else { b.as_str() }),
            "{v}"
        );
    }
    let pa = completion(s, one(json!("Hello"))).await["usage"]["prompt_tokens"].clone();
    let pb = completion(s, one(json!(COUNT))).await["usage"]["prompt_tokens"].clone();
    assert_eq!(
        v["usage"]["prompt_tokens"].as_u64(),
        Some(pa.as_u64().unwrap() + pb.as_u64().unwrap())
    );
    // Token-id prompts, as a list.
    let ta: Vec<u64> = ids(s, "Hello").await.iter().map(|t| t.0).collect();
    let tb: Vec<u64> = ids(s, COUNT).await.iter().map(|t| t.0).collect();
    let v = completion(s, one(json!([ta, tb]))).await;
    assert_eq!(v["choices"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["choices"][1]["index"], 1);
    refused(s, "/v1/completions", json!({"prompt": []}), "prompt").await;
}

/// A streamed choice: its text and the finish reasons seen.
type Streamed = (String, Vec<String>);

/// Per choice index, the streamed choice; and the usage chunk, if any.
fn by_index(payloads: &[String]) -> (HashMap<u64, Streamed>, Option<Value>) {
    let mut out: HashMap<u64, Streamed> = HashMap::new();
    let mut usage = None;
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    for p in &payloads[..payloads.len() - 1] {
        let chunk: Value = serde_json::from_str(p).expect("chunk JSON");
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
        for c in chunk["choices"].as_array().expect("choices") {
            let entry = out.entry(c["index"].as_u64().expect("index")).or_default();
            entry.0.push_str(c["text"].as_str().unwrap_or(""));
            if let Some(r) = c["finish_reason"].as_str() {
                entry.1.push(r.to_string());
            }
        }
    }
    (out, usage)
}

#[tokio::test]
async fn n_with_stream_tags_every_choice() {
    let s = main_server();
    let body = json!({"prompt": ["Once upon a time", COUNT], "max_tokens": 6, "n": 2,
                      "temperature": 1.0, "seed": 11});
    let whole = completion(s, body.clone()).await;
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (choices, usage) = by_index(&stream(s, "/v1/completions", &streamed).await);
    assert_eq!(choices.len(), 4);
    for (i, (text, reasons)) in &choices {
        assert_eq!(reasons.len(), 1, "choice {i}: {reasons:?}");
        assert_eq!(whole["choices"][*i as usize]["text"], *text, "choice {i}");
    }
    let usage = usage.expect("usage chunk");
    assert_eq!(
        usage["completion_tokens"],
        whole["usage"]["completion_tokens"]
    );
    // Chat with n and stream.
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "n": 3,
                      "stream": true});
    let payloads = stream(s, "/v1/chat/completions", &chat).await;
    let mut finished = [0; 3];
    for p in &payloads[..payloads.len() - 1] {
        let chunk: Value = serde_json::from_str(p).unwrap();
        for c in chunk["choices"].as_array().unwrap() {
            if c["finish_reason"].is_string() {
                finished[c["index"].as_u64().unwrap() as usize] += 1;
            }
        }
    }
    assert_eq!(finished, [1, 1, 1]);
}

#[tokio::test]
async fn echo_prepends_the_prompt() {
    let s = main_server();
    let plain = completion(
        s,
        json!({"prompt": COUNT, "max_tokens": 3, "temperature": 0}),
    )
    .await;
    let body = json!({"prompt": COUNT, "max_tokens": 3, "temperature": 0, "echo": true});
    let v = completion(s, body.clone()).await;
    assert_eq!(text(&v, 0), format!("{COUNT}{}", text(&plain, 0)));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (choices, _) = by_index(&stream(s, "/v1/completions", &streamed).await);
    assert_eq!(choices[&0].0, text(&v, 0));
    let toks: Vec<u64> = ids(s, COUNT).await.iter().map(|t| t.0).collect();
    let v = completion(
        s,
        json!({"prompt": toks, "max_tokens": 3, "temperature": 0, "echo": true}),
    )
    .await;
    assert_eq!(text(&v, 0), format!("{COUNT}{}", text(&plain, 0)));
    let v = refused(
        s,
        "/v1/completions",
        json!({"prompt": COUNT, "echo": true, "logprobs": 1}),
        "echo",
    )
    .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt logprobs"),
        "{v}"
    );
}

#[tokio::test]
async fn best_of_returns_the_most_likely_candidates() {
    let s = main_server();
    let sampled = json!({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0,
                         "seed": 3});
    // Candidate j runs with seed + j, exactly as choice j of n = 4 does.
    let mut all = sampled.clone();
    all["n"] = json!(4);
    all["logprobs"] = json!(0);
    let all = completion(s, all).await;
    let score = |c: &Value| -> f64 {
        c["logprobs"]["token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_f64().unwrap())
            .sum()
    };
    let mut ranked: Vec<(f64, String)> = all["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (score(c), c["text"].as_str().unwrap().to_string()))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut best = sampled.clone();
    best["best_of"] = json!(4);
    best["n"] = json!(2);
    let v = completion(s, best).await;
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2, "{v}");
    assert_eq!(text(&v, 0), ranked[0].1, "{v} vs {ranked:?}");
    assert_eq!(text(&v, 1), ranked[1].1, "{v} vs {ranked:?}");
    assert!(
        choices[0]["logprobs"].is_null(),
        "logprobs were not asked for: {v}"
    );
    refused(
        s,
        "/v1/completions",
        json!({"prompt": "hi", "best_of": 1, "n": 2}),
        "best_of",
    )
    .await;
    refused(
        s,
        "/v1/completions",
        json!({"prompt": "hi", "best_of": 2, "stream": true}),
        "best_of",
    )
    .await;
}

#[tokio::test]
async fn priority_below_the_client_minimum_is_refused() {
    let s = main_server();
    for p in [0, 5] {
        completion(s, json!({"prompt": "hi", "max_tokens": 1, "priority": p})).await;
    }
    // The default --min-client-priority 0: clients may only lower their own urgency.
    refused(
        s,
        "/v1/completions",
        json!({"prompt": "hi", "priority": -5}),
        "priority",
    )
    .await;
    refused(
        s,
        "/v1/completions",
        json!({"prompt": "hi", "priority": 1i64 << 40}),
        "priority",
    )
    .await;
}

fn vector(v: &Value, i: usize) -> Vec<f64> {
    v["data"][i]["embedding"]
        .as_array()
        .expect("float embedding")
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[tokio::test]
async fn embeddings_are_unit_vectors_of_the_hidden_size() {
    let s = main_server();
    let (status, one) = post(s, "/v1/embeddings", &json!({"input": "Hello world"})).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["object"], "list");
    assert_eq!(one["data"][0]["object"], "embedding");
    let v = vector(&one, 0);
    assert_eq!(v.len(), 576, "SmolLM2-135M's hidden size");
    let norm: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    // The prompt as generation would tokenize it (special tokens as the model adds them).
    let (_, tok) = post(s, "/tokenize", &json!({"inputs": "Hello world"})).await;
    let prompt_ids: Vec<u64> = tok
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    assert_eq!(one["usage"]["prompt_tokens"], prompt_ids.len(), "{one}");
    assert!(one["id"].as_str().unwrap().starts_with("embd-"), "{one}");

    // A list (the same text again, and another) and token ids give the same vectors.
    let (status, list) = post(
        s,
        "/v1/embeddings",
        &json!({"input": ["Hello world", "A different sentence."], "dimensions": 576}),
    )
    .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["data"][1]["index"], 1);
    let same = vector(&list, 0);
    assert!(v.iter().zip(&same).all(|(a, b)| (a - b).abs() < 1e-6));
    let other = vector(&list, 1);
    let cos: f64 = v.iter().zip(&other).map(|(a, b)| a * b).sum();
    assert!(cos < 0.9999, "different inputs, cosine {cos}");
    let (status, by_ids) = post(s, "/v1/embeddings", &json!({"input": prompt_ids})).await;
    assert_eq!(status, 200, "{by_ids}");
    assert!(v
        .iter()
        .zip(&vector(&by_ids, 0))
        .all(|(a, b)| (a - b).abs() < 1e-6));

    // base64: the little-endian f32 bytes of the same vector.
    let (status, b64) = post(
        s,
        "/v1/embeddings",
        &json!({"input": "Hello world", "encoding_format": "base64"}),
    )
    .await;
    assert_eq!(status, 200, "{b64}");
    let text = b64["data"][0]["embedding"].as_str().expect("base64 string");
    let bytes = decode_base64(text);
    let floats: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // JSON carries each f32 in its shortest form, which reads back as the same f32.
    let as_f32: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    assert_eq!(floats, as_f32);

    refused(
        s,
        "/v1/embeddings",
        json!({"input": "hi", "dimensions": 64}),
        "dimensions",
    )
    .await;
    refused(
        s,
        "/v1/embeddings",
        json!({"input": "hi", "encoding_format": "int8"}),
        "encoding_format",
    )
    .await;
    refused(s, "/v1/embeddings", json!({"input": []}), "input").await;
    refused(s, "/v1/embeddings", json!({"input": [999999999]}), "input").await;
    // Generation still runs after embeddings (block accounting is checked exactly in
    // crates/model/tests/it/embedding_tiny_llama.rs).
    for _ in 0..3 {
        let (status, _) = post(s, "/v1/embeddings", &json!({"input": "word ".repeat(200)})).await;
        assert_eq!(status, 200);
    }
    completion(s, json!({"prompt": "hi", "max_tokens": 2})).await;
}

/// Standard base64 decoding (for the test only).
fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|&c| c != b'=') {
        bits = (bits << 6) | ALPHABET.iter().position(|&a| a == c).expect("base64 digit") as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

/// The entry of `token` at prompt position `pos` of a `prompt_logprobs` list.
fn prompt_entry(list: &Value, pos: usize, token: u64) -> &Value {
    &list[pos][token.to_string()]
}

#[tokio::test]
async fn prompt_logprobs_score_every_prompt_token() {
    let s = main_server();
    let prompt: Vec<u64> = ids(s, "The capital of France is")
        .await
        .iter()
        .map(|t| t.0)
        .collect();
    let v = completion(
        s,
        json!({"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 1,
               "prompt_logprobs": 2}),
    )
    .await;
    let list = &v["choices"][0]["prompt_logprobs"];
    let list_len = list.as_array().expect("prompt_logprobs list").len();
    assert_eq!(list_len, prompt.len(), "{v}");
    assert!(list[0].is_null(), "the first token has no context: {v}");
    for (pos, &token) in prompt.iter().enumerate().skip(1) {
        let entries = list[pos].as_object().expect("entries");
        assert!((2..=3).contains(&entries.len()), "{pos}: {entries:?}");
        let own = prompt_entry(list, pos, token);
        assert!(own["logprob"].as_f64().expect("logprob") <= 0.0);
        assert!(own["rank"].as_u64().expect("rank") >= 1);
        let ranks: Vec<u64> = entries
            .values()
            .map(|e| e["rank"].as_u64().unwrap())
            .collect();
        assert!(
            ranks.contains(&1) && ranks.contains(&2),
            "{pos}: {entries:?}"
        );
    }
    // The greedy token scored as the next prompt token has the logprob it was sampled with.
    let lp = &v["choices"][0]["logprobs"];
    let sampled = lp["token_logprobs"][0].as_f64().expect("sampled logprob");
    let (_, next) = ids(s, lp["tokens"][0].as_str().expect("token")).await[0].clone();
    assert_eq!(next, lp["tokens"][0].as_str().unwrap());
    let next_id = ids(s, &next).await[0].0;
    let mut extended = prompt.clone();
    extended.push(next_id);
    let w = completion(
        s,
        json!({"prompt": extended, "max_tokens": 1, "prompt_logprobs": 0}),
    )
    .await;
    let scored = prompt_entry(&w["choices"][0]["prompt_logprobs"], prompt.len(), next_id);
    let scored = scored["logprob"].as_f64().expect("scored logprob");
    assert!(
        (scored - sampled).abs() < 1e-3,
        "scored {scored}, sampled {sampled}"
    );
    assert_eq!(
        prompt_entry(&w["choices"][0]["prompt_logprobs"], prompt.len(), next_id)["rank"],
        1,
        "the greedy token ranks first"
    );

    // Chat carries them at the top level; every choice of n shares its prompt's list.
    let (status, chat) = post(
        s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                "prompt_logprobs": 1, "n": 2}),
    )
    .await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(
        chat["prompt_logprobs"].as_array().map(Vec::len),
        chat["usage"]["prompt_tokens"].as_u64().map(|n| n as usize),
        "{chat}"
    );
    let plain = completion(s, json!({"prompt": "hi", "max_tokens": 1})).await;
    assert!(
        plain["choices"][0].get("prompt_logprobs").is_none(),
        "{plain}"
    );

    refused(
        s,
        "/v1/completions",
        json!({"prompt": "hi", "prompt_logprobs": 1, "stream": true}),
        "prompt_logprobs",
    )
    .await;
    refused(
        s,
        "/v1/completions",
        json!({"prompt": "hi", "prompt_logprobs": 21}),
        "prompt_logprobs",
    )
    .await;
    refused(
        s,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Hi"}], "prompt_logprobs": -1}),
        "prompt_logprobs",
    )
    .await;
}
