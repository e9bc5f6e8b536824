//! Reasoning output over HTTP on `tests/fixtures/tiny-qwen3-think`, a tiny Qwen3 trained so
//! that its greedy reply to any chat prompt is `<think>\n{REASONING}</think>\n\n{ANSWER}`
//! (its Qwen3-style template makes the parser read off the template); and that a model that
//! does not think (the default model) keeps every character of its reply as the answer.

use std::sync::OnceLock;

use kestrel_server::launch::LaunchOptions;
use kestrel_server::reasoning::ReasoningParser;
use kestrel_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{self, Server};

const THINKER: &str = "tests/fixtures/tiny-qwen3-think";
/// The fixture's reasoning (the text between the tags, blanks after `<think>` dropped).
const REASONING: &str = "the user wants a greeting\n";
/// The fixture's answer.
const ANSWER: &str = "Hello there!";

/// The test servers' options within the fixture's 256-token context.
fn thinker_options() -> LaunchOptions {
    LaunchOptions {
        max_total_tokens: Some(256),
        max_input_tokens: Some(192),
        ..common::options(8)
    }
}

/// The thinking model, its parser read off its template.
fn thinker() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        common::start_model(THINKER.as_ref(), thinker_options(), ServerConfig::default())
    })
}

/// The thinking model with `--reasoning-parser none`.
fn unparsed_thinker() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let opts = LaunchOptions {
            reasoning_parser: Some(None),
            ..thinker_options()
        };
        common::start_model(THINKER.as_ref(), opts, ServerConfig::default())
    })
}

fn chat(extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "good morning to you"}],
        "max_tokens": 48,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().expect("object").clone() {
        body[k] = v;
    }
    body
}

#[tokio::test]
async fn a_chat_reply_splits_reasoning_from_the_answer() {
    let (status, body) = common::post(thinker(), "/v1/chat/completions", &chat(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    let message = &body["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], REASONING, "{body}");
    assert_eq!(message["reasoning"], REASONING);
    assert_eq!(message["content"], ANSWER);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let usage = &body["usage"];
    let reasoning_tokens = usage["completion_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .expect("reasoning tokens");
    let completion = usage["completion_tokens"].as_u64().expect("completion");
    assert!(
        reasoning_tokens >= 3 && reasoning_tokens < completion,
        "{usage}"
    );
}

#[tokio::test]
async fn a_streamed_chat_reply_sends_reasoning_deltas_then_content_deltas() {
    let body = chat(json!({"stream": true, "stream_options": {"include_usage": true}}));
    let payloads = common::stream(thinker(), "/v1/chat/completions", &body).await;
    let (mut reasoning, mut content, mut order) = (String::new(), String::new(), Vec::new());
    let mut usage = Value::Null;
    for p in payloads.iter().filter(|p| *p != "[DONE]") {
        let chunk: Value = serde_json::from_str(p).expect("chunk");
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
        let Some(delta) = chunk["choices"].get(0).map(|c| &c["delta"]) else {
            continue;
        };
        if let Some(r) = delta["reasoning_content"].as_str() {
            assert_eq!(delta["reasoning"], r, "both names carry the delta");
            reasoning.push_str(r);
            order.push('r');
        }
        if let Some(c) = delta["content"].as_str().filter(|c| !c.is_empty()) {
            content.push_str(c);
            order.push('c');
        }
    }
    assert_eq!((reasoning.as_str(), content.as_str()), (REASONING, ANSWER));
    assert!(order.windows(2).all(|w| w != ['c', 'r']), "{order:?}");
    assert!(
        usage["completion_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .is_some_and(|n| n >= 3),
        "{usage}"
    );
}

#[tokio::test]
async fn template_kwargs_turn_thinking_off() {
    let body = chat(json!({"chat_template_kwargs": {"enable_thinking": false}}));
    let (status, body) = common::post(thinker(), "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{body}");
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], ANSWER, "{body}");
    assert!(message.get("reasoning_content").is_none(), "{body}");
}

#[tokio::test]
async fn template_kwargs_may_not_replace_what_the_server_sets() {
    for key in ["messages", "add_generation_prompt", "tools"] {
        let body = chat(json!({"chat_template_kwargs": {key: []}}));
        let (status, body) = common::post(thinker(), "/v1/chat/completions", &body).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["param"], "chat_template_kwargs", "{body}");
    }
    let body = chat(json!({"chat_template_kwargs": "enable_thinking"}));
    let (status, _) = common::post(thinker(), "/v1/chat/completions", &body).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn with_the_parser_off_the_reply_is_the_raw_text() {
    let (status, body) =
        common::post(unparsed_thinker(), "/v1/chat/completions", &chat(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    let message = &body["choices"][0]["message"];
    let raw = format!("<think>\n{REASONING}</think>\n\n{ANSWER}");
    assert_eq!(message["content"], raw.as_str(), "{body}");
    assert!(message.get("reasoning_content").is_none());
    assert!(body["usage"].get("completion_tokens_details").is_none());
}

/// The default model (which does not think) with a reasoning parser forced on.
fn parsed_default_model() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let opts = LaunchOptions {
            reasoning_parser: Some(Some(ReasoningParser::Qwen3)),
            ..common::options(8)
        };
        common::start(opts, ServerConfig::default())
    })
}

#[tokio::test]
async fn a_parser_never_eats_the_reply_of_a_model_that_does_not_think() {
    let body = json!({
        "messages": [{"role": "user", "content": "Say </think> and <think>, then hello."}],
        "max_tokens": 32,
        "temperature": 0,
    });
    let (status, plain) = common::post(common::main_server(), "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{plain}");
    let (status, parsed) =
        common::post(parsed_default_model(), "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{parsed}");
    let content = &parsed["choices"][0]["message"]["content"];
    assert!(!content.as_str().unwrap_or_default().is_empty(), "{parsed}");
    assert_eq!(content, &plain["choices"][0]["message"]["content"]);
    assert!(parsed["choices"][0]["message"]
        .get("reasoning_content")
        .is_none());
    let reasoning_tokens = &parsed["usage"]["completion_tokens_details"]["reasoning_tokens"];
    assert_eq!(reasoning_tokens, 0, "{parsed}");
}

#[tokio::test]
async fn detokenize_inverts_tokenize() {
    let text = "Detokenize me, please: 42 tokens?";
    let (status, tokens) =
        common::post(common::main_server(), "/tokenize", &json!({"inputs": text})).await;
    assert_eq!(status, 200, "{tokens}");
    let ids: Vec<u64> = tokens
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t["id"].as_u64().expect("id"))
        .collect();
    let (status, body) = common::post(
        common::main_server(),
        "/detokenize",
        &json!({"tokens": ids}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["prompt"].as_str().expect("prompt").ends_with(text),
        "{body}"
    );
    for bad in [json!([-1]), json!([1_000_000_000]), json!("abc")] {
        let (status, body) = common::post(
            common::main_server(),
            "/detokenize",
            &json!({"tokens": bad}),
        )
        .await;
        assert_eq!(status, 400, "{body}");
    }
}

/// A Messages body on the thinking model.
fn message(extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "good morning to you"}],
        "max_tokens": 48,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().expect("object").clone() {
        body[k] = v;
    }
    body
}

#[tokio::test]
async fn messages_show_reasoning_as_thinking_blocks_whole_and_streamed() {
    let (status, whole) = common::post(thinker(), "/v1/messages", &message(json!({}))).await;
    assert_eq!(status, 200, "{whole}");
    let expected = json!([
        {"type": "thinking", "thinking": REASONING, "signature": ""},
        {"type": "text", "text": ANSWER},
    ]);
    assert_eq!(whole["content"], expected, "{whole}");
    assert_eq!(whole["stop_reason"], "end_turn");
    let body =
        message(json!({"stream": true, "thinking": {"type": "enabled", "budget_tokens": 1024}}));
    let events = crate::anthropic_http::events(thinker(), "/v1/messages", &body).await;
    let deltas: Vec<&str> = events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .filter_map(|(_, d)| d["delta"]["type"].as_str())
        .collect();
    let first_text = deltas
        .iter()
        .position(|d| *d == "text_delta")
        .expect("text");
    assert!(
        deltas[..first_text].iter().all(|d| *d == "thinking_delta"),
        "{deltas:?}"
    );
    assert!(first_text > 0, "{deltas:?}");
    let streamed = crate::anthropic_http::reassemble(&events);
    assert_eq!(streamed["content"], expected, "{streamed}");
}

#[tokio::test]
async fn messages_thinking_disabled_turns_thinking_off() {
    let body = message(json!({"thinking": {"type": "disabled"}}));
    let (status, off) = common::post(thinker(), "/v1/messages", &body).await;
    assert_eq!(status, 200, "{off}");
    assert_eq!(
        off["content"],
        json!([{"type": "text", "text": ANSWER}]),
        "{off}"
    );
}
