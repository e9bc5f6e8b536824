//! `X-Request-Id`: a usable client id is echoed, a missing or unusable one is replaced by a
//! generated id (32 hex digits), on every route: successes, OpenAI and TGI errors (whose bodies
//! name it as `request_id`), 401s, 404s and streams.

use crate::common::{self, client, keyed_server, main_server};

use serde_json::{json, Value};

/// Sends `method path` with `id` (if any) and returns status, the echoed id and the body.
async fn send(
    server: &common::Server,
    method: reqwest::Method,
    path: &str,
    id: Option<&str>,
    body: Option<Value>,
) -> (u16, String, String) {
    let mut req = client().request(method, format!("{}{path}", server.base));
    if let Some(id) = id {
        req = req.header("x-request-id", id);
    }
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let echoed = resp
        .headers()
        .get("x-request-id")
        .map(|v| v.to_str().expect("ASCII id").to_string())
        .unwrap_or_default();
    (status, echoed, resp.text().await.expect("body"))
}

fn is_generated(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

#[tokio::test]
async fn a_client_id_is_echoed() {
    let id = "client-id_42.abc:XYZ";
    let (status, echoed, _) = send(
        main_server(),
        reqwest::Method::GET,
        "/v1/models",
        Some(id),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(echoed, id);
}

#[tokio::test]
async fn without_a_client_id_one_is_generated_per_request() {
    let (status, a, _) = send(main_server(), reqwest::Method::GET, "/health", None, None).await;
    assert_eq!(status, 200);
    let (_, b, _) = send(main_server(), reqwest::Method::GET, "/health", None, None).await;
    assert!(is_generated(&a), "{a:?}");
    assert!(is_generated(&b), "{b:?}");
    assert_ne!(a, b);
}

#[tokio::test]
async fn unusable_client_ids_are_replaced() {
    let too_long = "a".repeat(129);
    let longest = "b".repeat(128);
    for bad in [too_long.as_str(), "has space", "tab\there"] {
        let (status, echoed, _) = send(
            main_server(),
            reqwest::Method::GET,
            "/v1/models",
            Some(bad),
            None,
        )
        .await;
        assert_eq!(status, 200);
        assert!(is_generated(&echoed), "{bad:?} was replaced by {echoed:?}");
    }
    let (_, echoed, _) = send(
        main_server(),
        reqwest::Method::GET,
        "/v1/models",
        Some(&longest),
        None,
    )
    .await;
    assert_eq!(echoed, longest, "128 bytes are still accepted");
}

#[tokio::test]
async fn openai_error_bodies_name_the_request_id() {
    let body = json!({"prompt": "hi", "max_tokens": 2, "temperature": -1.0});
    let (status, echoed, text) = send(
        main_server(),
        reqwest::Method::POST,
        "/v1/completions",
        Some("bad-temp-1"),
        Some(body),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    assert_eq!(echoed, "bad-temp-1");
    let v: Value = serde_json::from_str(&text).expect("JSON error");
    assert_eq!(v["error"]["request_id"], "bad-temp-1", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "temperature");
}

#[tokio::test]
async fn tgi_error_bodies_name_the_request_id() {
    let body = json!({"inputs": "hi", "parameters": {"max_new_tokens": 2, "top_p": 7.0}});
    let (status, echoed, text) = send(
        main_server(),
        reqwest::Method::POST,
        "/generate",
        None,
        Some(body),
    )
    .await;
    assert_eq!(status, 422, "{text}");
    assert!(is_generated(&echoed));
    let v: Value = serde_json::from_str(&text).expect("JSON error");
    assert_eq!(v["error_type"], "validation");
    assert_eq!(v["request_id"], echoed.as_str(), "{v}");
}

#[tokio::test]
async fn unknown_paths_get_a_404_with_the_id() {
    let (status, echoed, text) = send(
        main_server(),
        reqwest::Method::GET,
        "/no/such/route",
        Some("lost-1"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(echoed, "lost-1");
    let v: Value = serde_json::from_str(&text).expect("JSON 404");
    assert_eq!(v["error"]["type"], "not_found_error");
    assert_eq!(v["error"]["request_id"], "lost-1");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/no/such/route"));
}

#[tokio::test]
async fn rejected_keys_get_the_id_too() {
    let (status, echoed, text) = send(
        keyed_server(),
        reqwest::Method::GET,
        "/v1/models",
        Some("nokey-1"),
        None,
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(echoed, "nokey-1");
    let v: Value = serde_json::from_str(&text).expect("JSON 401");
    assert_eq!(v["error"]["request_id"], "nokey-1");
}

#[tokio::test]
async fn streams_carry_the_id_header() {
    let body = json!({
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 2,
        "stream": true
    });
    let (status, echoed, text) = send(
        main_server(),
        reqwest::Method::POST,
        "/v1/chat/completions",
        Some("stream-1"),
        Some(body),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(echoed, "stream-1");
    assert!(text.contains("data: [DONE]"), "{text}");
}
