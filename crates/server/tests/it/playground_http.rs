//! The web playground over HTTP: `GET /` is the page (no key needed), its script and style sheet
//! have their content types, every file carries the Content-Security-Policy, and `POST /` is
//! still TGI's generate route, behind the key like every API route.

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use crate::common::{client, keyed_server, main_server, Server, KEY};

/// The page's stable test hooks.
const TEST_IDS: &[&str] = &[
    "prompt-input",
    "send",
    "stop",
    "reset",
    "assistant-message",
    "ttft",
    "tokens-per-second",
    "system-prompt",
    "kv-usage",
    "api-key-form",
];

async fn fetch(server: &Server, path: &str) -> (u16, HeaderMap, String) {
    let resp = client()
        .get(format!("{}{path}", server.base))
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.expect("body"))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .expect("ASCII header")
}

fn assert_locked_down(headers: &HeaderMap) {
    let csp = header(headers, "content-security-policy");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "CSP lacks {directive}: {csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(!csp.contains("unsafe-eval"), "{csp}");
    assert!(!csp.contains('*'), "{csp}");
    assert_eq!(header(headers, "x-content-type-options"), "nosniff");
}

#[tokio::test]
async fn the_page_and_its_assets() {
    let s = main_server();
    let (status, headers, html) = fetch(s, "/").await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), "text/html; charset=utf-8");
    assert_locked_down(&headers);
    assert!(html.starts_with("<!doctype html>"), "{}", &html[..60]);
    for id in TEST_IDS {
        let attr = format!("data-testid=\"{id}\"");
        // assistant-message, ttft and tokens-per-second are made by the script per answer.
        let in_script = fetch(s, "/playground/app.js").await.2;
        assert!(
            html.contains(&attr) || in_script.contains(&format!("\"{id}\"")),
            "no {attr} in the page or its script"
        );
    }
    for (path, content_type, marker) in [
        (
            "/playground/app.js",
            "text/javascript; charset=utf-8",
            "/v1/chat/completions",
        ),
        (
            "/playground/style.css",
            "text/css; charset=utf-8",
            ".message",
        ),
    ] {
        let (status, headers, body) = fetch(s, path).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(header(&headers, "content-type"), content_type, "{path}");
        assert_locked_down(&headers);
        assert!(body.contains(marker), "{path} lacks {marker}");
        assert!(html.contains(path), "the page does not load {path}");
    }
    // The script asks for the usage chunk and reads the metric names the server exports.
    let script = fetch(s, "/playground/app.js").await.2;
    for name in [
        "include_usage",
        kestrel_engine::metrics::names::NUM_REQUESTS_RUNNING,
        kestrel_engine::metrics::names::NUM_REQUESTS_WAITING,
        kestrel_engine::metrics::names::KV_CACHE_USAGE_PERC,
        kestrel_engine::metrics::names::GENERATION_TOKENS_TOTAL,
    ] {
        assert!(script.contains(name), "app.js does not use {name}");
    }
    assert_eq!(fetch(s, "/playground/missing.js").await.0, 404);
    assert_eq!(fetch(s, "/playground/").await.0, 404);
}

#[tokio::test]
async fn post_root_is_still_tgi() {
    let s = main_server();
    let body = json!({"inputs": "The capital of France is", "parameters": {"max_new_tokens": 3}});
    let (status, v) = crate::common::post(s, "/", &body).await;
    assert_eq!(status, 200, "{v}");
    // TGI's generate answer, not the page.
    assert!(v["generated_text"].is_string(), "{v}");
}

#[tokio::test]
async fn the_page_needs_no_key_but_the_api_does() {
    let s = keyed_server();
    for path in ["/", "/playground/app.js", "/playground/style.css"] {
        assert_eq!(fetch(s, path).await.0, 200, "{path} without a key");
    }
    assert_eq!(fetch(s, "/v1/models").await.0, 401);
    let body = json!({"inputs": "hi", "parameters": {"max_new_tokens": 2}});
    let post_root = |key: Option<&str>| {
        let mut req = client()
            .post(format!("{}/", s.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        req.send()
    };
    let resp = post_root(None).await.expect("send");
    assert_eq!(resp.status().as_u16(), 401, "POST / without a key");
    let v: Value = serde_json::from_str(&resp.text().await.expect("body")).expect("JSON");
    assert!(v["error"].is_object() || v["error"].is_string(), "{v}");
    let resp = post_root(Some(KEY)).await.expect("send");
    assert_eq!(resp.status().as_u16(), 200, "POST / with the key");
    // The other methods on / are neither the page nor TGI.
    let resp = client()
        .put(format!("{}/", s.base))
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    assert_eq!(status, 405, "PUT / answered {status}");
}
