//! Limits that keep one request from slowing, stalling or crashing the server for others.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kestrel_server::launch::LaunchOptions;
use kestrel_server::ServerConfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{self, main_server, Server};

#[tokio::test]
async fn a_stop_string_over_the_byte_cap_is_refused_naming_stop() {
    let long = "x".repeat(kestrel_server::state::MAX_STOP_BYTES + 1);
    let (status, body) = common::post(
        main_server(),
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 1, "stop": [long]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "stop", "{body}");
    let at_cap = "y".repeat(kestrel_server::state::MAX_STOP_BYTES);
    let (status, body) = common::post(
        main_server(),
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2, "stop": [at_cap]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// A server with one-second read timeouts, two connections at most, an origin allow-list,
/// one request at a time and a small stream buffer.
fn guarded_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let config = ServerConfig {
            header_read_timeout: Duration::from_secs(1),
            body_read_timeout: Duration::from_secs(1),
            max_connections: 4,
            cors_origins: vec![GOOD_ORIGIN.into()],
            ..ServerConfig::default()
        };
        let opts = LaunchOptions {
            max_buffered_events: 4,
            ..common::options(1)
        };
        common::start(opts, config)
    })
}

const GOOD_ORIGIN: &str = "https://good.example";

fn addr(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// Reads until the peer closes (or `limit` passes); returns what arrived.
async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(limit, stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn oversized_tokenize_input_is_refused_before_tokenizing() {
    let big = "a ".repeat(kestrel_server::state::DEFAULT_MAX_INPUT_BYTES / 2 + 1);
    let (status, body) = common::post(main_server(), "/tokenize", &json!({ "inputs": big })).await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("max-input-bytes"),
        "{body}"
    );
    let (status, body) = common::post(
        main_server(),
        "/v1/completions",
        &json!({"prompt": big, "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["param"], "prompt", "{body}");
}

#[tokio::test]
async fn health_answers_promptly_while_large_inputs_are_tokenized() {
    let s = main_server();
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(20_000);
    let big: Vec<_> = (0..3)
        .map(|_| {
            let body = json!({ "inputs": text.clone() });
            tokio::spawn(async move { common::post(main_server(), "/tokenize", &body).await.0 })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    let (status, _) = common::get(s, "/health/live").await;
    let live = start.elapsed();
    assert_eq!(status, 200);
    for task in big {
        assert_eq!(task.await.unwrap(), 200);
    }
    assert!(
        live < Duration::from_millis(500),
        "/health/live took {live:?}"
    );
}

#[tokio::test]
async fn a_half_sent_body_gets_408_after_the_body_timeout() {
    let s = guarded_server();
    let mut stream = TcpStream::connect(addr(s)).await.unwrap();
    let head = "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"prompt\":";
    stream.write_all(head.as_bytes()).await.unwrap();
    let start = Instant::now();
    let reply = read_to_close(&mut stream, Duration::from_secs(10)).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn half_sent_headers_close_the_connection_after_the_header_timeout() {
    let s = guarded_server();
    let mut stream = TcpStream::connect(addr(s)).await.unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    let reply = read_to_close(&mut stream, Duration::from_secs(10)).await;
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "closed after {waited:?}: {reply:?}"
    );
    assert!(!reply.contains("200 OK"), "{reply:?}");
}

#[tokio::test]
async fn cors_allows_listed_origins_only() {
    let s = guarded_server();
    for (origin, allowed) in [(GOOD_ORIGIN, true), ("https://evil.example", false)] {
        let resp = common::client()
            .get(format!("{}/v1/models", s.base))
            .header("origin", origin)
            .send()
            .await
            .unwrap();
        let header = resp.headers().get("access-control-allow-origin").cloned();
        if allowed {
            assert_eq!(header.unwrap(), origin);
        } else {
            assert!(header.is_none(), "{origin}: {header:?}");
        }
    }
}

#[tokio::test]
async fn health_probes_queue_no_engine_work() {
    let s = guarded_server();
    let (_, before) = common::get(s, "/metrics").await;
    for path in ["/health", "/health/ready", "/health/live"].repeat(20) {
        let (status, body) = common::get(s, path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, after) = common::get(s, "/metrics").await;
    for name in [
        "kestrel:prompt_tokens_total",
        "kestrel:generation_tokens_total",
        "kestrel:prefix_cache_queries_total",
    ] {
        assert_eq!(
            common::metric(&before, name).unwrap_or(0.0),
            common::metric(&after, name).unwrap_or(0.0),
            "{name}"
        );
    }
}

#[tokio::test]
async fn refusals_carry_a_bounded_retry_after() {
    let s = guarded_server();
    let body = json!({"prompt": "Count:", "max_tokens": 300, "ignore_eos": true, "stream": true});
    let mut open = common::client()
        .post(format!("{}/v1/completions", s.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(open.status().as_u16(), 200);
    assert!(open.chunk().await.unwrap().is_some());
    let resp = common::client()
        .post(format!("{}/v1/completions", s.base))
        .header("content-type", "application/json")
        .body(json!({"prompt": "hi", "max_tokens": 1}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    let secs: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=kestrel_server::throughput::MAX_RETRY_AFTER_SECS).contains(&secs),
        "{secs}"
    );
    drop(open);
}

/// A client that stops reading a stream: its request is aborted once the server's buffer is
/// full, well before `max_tokens`, and its KV blocks are freed while the socket stays open.
#[tokio::test]
async fn a_stalled_stream_reader_is_aborted_and_its_kv_freed() {
    let s = guarded_server();
    let (_, m0) = common::get(s, "/metrics").await;
    let generated0 = common::metric(&m0, "kestrel:generation_tokens_total").unwrap_or(0.0);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr(s).parse().unwrap()).await.unwrap();
    let body = json!({
        "messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": 1500, "ignore_eos": true, "stream": true,
        "logprobs": true, "top_logprobs": 20,
    })
    .to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut first = [0u8; 64];
    let n = stream.read(&mut first).await.unwrap();
    assert!(
        first[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&first[..n])
    );
    // Stop reading; wait for the engine to go idle while the socket is still open.
    let deadline = Instant::now() + Duration::from_secs(180);
    let metrics = loop {
        let (_, m) = common::get(s, "/metrics").await;
        let running = common::metric(&m, "kestrel:num_requests_running").unwrap_or(1.0);
        let usage = common::metric(&m, "kestrel:kv_cache_usage_perc").unwrap_or(1.0);
        if running == 0.0 && usage == 0.0 {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "still running: {running}, kv {usage}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let generated =
        common::metric(&metrics, "kestrel:generation_tokens_total").unwrap_or(0.0) - generated0;
    assert!(
        generated < 1500.0,
        "the request ran to max_tokens ({generated} tokens)"
    );
    drop(stream);
}

/// A server that requires an API key and allows [`GOOD_ORIGIN`].
fn keyed_cors_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let config = ServerConfig {
            api_keys: vec![common::KEY.into()],
            cors_origins: vec![GOOD_ORIGIN.into()],
            ..ServerConfig::default()
        };
        common::start(common::options(4), config)
    })
}

/// Browsers send a preflight without credentials before a keyed cross-origin POST: it must be
/// answered for listed origins (without the key), and get no CORS grant for others.
#[tokio::test]
async fn cors_preflight_is_answered_without_the_key_for_listed_origins_only() {
    let s = keyed_cors_server();
    for (origin, allowed) in [(GOOD_ORIGIN, true), ("https://evil.example", false)] {
        let resp = common::client()
            .request(
                reqwest::Method::OPTIONS,
                format!("{}/v1/chat/completions", s.base),
            )
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
            .await
            .unwrap();
        let h = resp.headers();
        let grant = h.get("access-control-allow-origin").cloned();
        if allowed {
            assert!(resp.status().is_success(), "{origin}: {}", resp.status());
            assert_eq!(grant.unwrap(), origin);
            let methods = h
                .get("access-control-allow-methods")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_ascii_uppercase();
            assert!(methods.contains("POST") || methods == "*", "{methods}");
            assert!(h.contains_key("access-control-allow-headers"), "{h:?}");
        } else {
            assert!(grant.is_none(), "{origin}: {grant:?}");
        }
    }
    // The real request still needs the key.
    let resp = common::client()
        .get(format!("{}/v1/models", s.base))
        .header("origin", GOOD_ORIGIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

/// With `max_connections` connections open, the next one waits in the listen backlog (its
/// request is not read) until a connection closes, then it is served.
#[tokio::test]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    static S: OnceLock<Server> = OnceLock::new();
    let s = S.get_or_init(|| {
        let config = ServerConfig {
            header_read_timeout: Duration::from_secs(60),
            max_connections: 2,
            ..ServerConfig::default()
        };
        common::start(common::options(4), config)
    });
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(addr(s)).await.unwrap();
        c.write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        held.push(c);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut third = TcpStream::connect(addr(s)).await.unwrap();
    third
        .write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(800), third.read(&mut buf)).await;
    assert!(early.is_err(), "served while at the connection cap");
    held.pop();
    let reply = read_to_close(&mut third, Duration::from_secs(10)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
}
