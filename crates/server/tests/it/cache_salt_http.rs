//! `cache_salt` over HTTP: the same prompt under another salt reports no cached tokens, under
//! the same salt it hits the prefix cache.

use crate::common;

use std::time::Instant;

use common::*;
use serde_json::{json, Value};

fn cached(resp: &Value) -> u64 {
    resp["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

async fn complete(prompt: &str, salt: &str) -> Value {
    let body = json!({"prompt": prompt, "max_tokens": 1, "cache_salt": salt});
    let (status, resp) = post(main_server(), "/v1/completions", &body).await;
    assert_eq!(status, 200, "{resp}");
    resp
}

#[tokio::test]
async fn salts_separate_the_prefix_cache() {
    let nonce = format!("{:?}", Instant::now());
    let prompt = format!(
        "Note {nonce}. {}",
        "The quick brown fox jumps over the lazy dog. ".repeat(12)
    );
    let first = complete(&prompt, "tenant-a").await;
    assert_eq!(cached(&first), 0, "{first}");
    let other = complete(&prompt, "tenant-b").await;
    assert_eq!(cached(&other), 0, "another salt must not hit: {other}");
    let same = complete(&prompt, "tenant-a").await;
    assert!(cached(&same) >= 64, "the same salt hits: {same}");
}

const KEY_A: &str = "sk-tenant-a-0001";
const KEY_B: &str = "sk-tenant-b-0002";

/// A server with two keys and `--cache-salt-by-api-key`.
fn salted_by_key_server() -> &'static Server {
    static S: std::sync::OnceLock<Server> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let config = kestrel_server::ServerConfig {
            api_keys: vec![KEY_A.into(), KEY_B.into()],
            cache_salt_by_api_key: true,
            ..kestrel_server::ServerConfig::default()
        };
        start(options(8), config)
    })
}

async fn complete_as(key: &str, route: &str, body: Value) -> Value {
    let resp = client()
        .post(format!("{}{route}", salted_by_key_server().base))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    serde_json::from_str(&resp.text().await.unwrap()).unwrap()
}

#[tokio::test]
async fn each_api_key_has_its_own_prefix_cache() {
    let nonce = format!("{:?}", Instant::now());
    let prompt = format!(
        "Memo {nonce}. {}",
        "Pack my box with five dozen liquor jugs. ".repeat(12)
    );
    let body = json!({"prompt": prompt, "max_tokens": 1});
    let first = complete_as(KEY_A, "/v1/completions", body.clone()).await;
    assert_eq!(cached(&first), 0, "{first}");
    let other_key = complete_as(KEY_B, "/v1/completions", body.clone()).await;
    assert_eq!(
        cached(&other_key),
        0,
        "another key must not hit: {other_key}"
    );
    let same_key = complete_as(KEY_A, "/v1/completions", body.clone()).await;
    assert!(cached(&same_key) >= 64, "the same key hits: {same_key}");
    // A request's own salt partitions further within its key.
    let salted = json!({"prompt": prompt, "max_tokens": 1, "cache_salt": "x"});
    let own_salt = complete_as(KEY_A, "/v1/completions", salted).await;
    assert_eq!(cached(&own_salt), 0, "{own_salt}");
    // The chat route is salted too: B's chat turn does not hit A's.
    let chat = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 1});
    let _ = complete_as(KEY_A, "/v1/chat/completions", chat.clone()).await;
    let b_chat = complete_as(KEY_B, "/v1/chat/completions", chat.clone()).await;
    assert_eq!(cached(&b_chat), 0, "{b_chat}");
    let a_chat = complete_as(KEY_A, "/v1/chat/completions", chat).await;
    assert!(cached(&a_chat) >= 64, "{a_chat}");
}
