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
