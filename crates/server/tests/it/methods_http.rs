//! A known path with a method it does not take answers 405 with an OpenAI-shaped JSON error
//! body, the `Allow` header listing the methods it does take and the request's `X-Request-Id`;
//! unknown paths stay 404 and the right method still reaches its handler.

use crate::common::{client, keyed_server, main_server, Server};

use serde_json::Value;

struct Answer {
    status: u16,
    allow: Vec<String>,
    content_type: String,
    request_id: String,
    body: Value,
}

async fn send(server: &Server, method: reqwest::Method, path: &str, id: &str) -> Answer {
    let resp = client()
        .request(method, format!("{}{path}", server.base))
        .header("x-request-id", id)
        .send()
        .await
        .expect("request");
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().expect("ASCII header").to_string())
            .unwrap_or_default()
    };
    let allow = header("allow")
        .split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    let (content_type, request_id) = (header("content-type"), header("x-request-id"));
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: a non-JSON body ({e}): {text:?}"));
    Answer {
        status,
        allow,
        content_type,
        request_id,
        body,
    }
}

/// Checks a 405 for `method path`: JSON error naming both, `Allow` equal to `allowed`, id echoed.
async fn assert_405(server: &Server, method: reqwest::Method, path: &str, allowed: &[&str]) {
    let id = format!("wrong-method-{}", method.as_str().to_lowercase());
    let a = send(server, method.clone(), path, &id).await;
    assert_eq!(a.status, 405, "{method} {path}: {}", a.body);
    let mut allow = a.allow.clone();
    allow.sort();
    assert_eq!(allow, allowed, "{method} {path}: Allow");
    assert!(
        a.content_type.starts_with("application/json"),
        "{}",
        a.content_type
    );
    assert_eq!(a.request_id, id);
    let error = &a.body["error"];
    assert_eq!(error["type"], "invalid_request_error", "{}", a.body);
    assert_eq!(error["request_id"], id.as_str(), "{}", a.body);
    assert!(
        error["param"].is_null() && error["code"].is_null(),
        "{}",
        a.body
    );
    let message = error["message"].as_str().expect("a message");
    assert!(
        message.contains(method.as_str()) && message.contains(path),
        "{message}"
    );
}

#[tokio::test]
async fn a_wrong_method_gets_an_openai_error_with_allow_and_the_request_id() {
    use reqwest::Method;
    let s = main_server();
    assert_405(s, Method::GET, "/v1/chat/completions", &["POST"]).await;
    assert_405(s, Method::PUT, "/v1/completions", &["POST"]).await;
    assert_405(s, Method::DELETE, "/generate", &["POST"]).await;
    assert_405(s, Method::POST, "/v1/models", &["GET", "HEAD"]).await;
    assert_405(s, Method::POST, "/health", &["GET", "HEAD"]).await;
    assert_405(s, Method::DELETE, "/", &["GET", "HEAD", "POST"]).await;
}

#[tokio::test]
async fn a_wrong_method_is_refused_before_the_api_key_is_asked_for() {
    // The method is wrong whoever asks, so a keyless client learns it too (no body is run).
    assert_405(
        keyed_server(),
        reqwest::Method::GET,
        "/v1/chat/completions",
        &["POST"],
    )
    .await;
}

#[tokio::test]
async fn unknown_paths_stay_404_and_right_methods_reach_their_handlers() {
    let s = main_server();
    let a = send(s, reqwest::Method::DELETE, "/v1/nothing-here", "nf-1").await;
    assert_eq!(a.status, 404, "{}", a.body);
    assert_eq!(a.body["error"]["type"], "not_found_error");
    assert_eq!(a.request_id, "nf-1");
    assert!(a.allow.is_empty(), "no Allow on a 404: {:?}", a.allow);
    let a = send(s, reqwest::Method::GET, "/v1/models", "ok-1").await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["object"], "list");
}
