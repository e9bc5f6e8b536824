//! A real server on the default model, started in-process on 127.0.0.1:0, and a small client.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use kestrel_model::ThreadPool;
use kestrel_server::launch::{KvBudget, LaunchOptions};
use kestrel_server::ServerConfig;
use serde_json::Value;

/// The API key of the keyed server.
pub const KEY: &str = "sk-test-0123456789";

/// A running server.
pub struct Server {
    pub base: String,
}

fn model_path() -> PathBuf {
    let path = std::env::var_os("KESTREL_DEFAULT_MODEL").unwrap_or_else(|| {
        panic!("KESTREL_DEFAULT_MODEL is not set: point it at the default model (SmolLM2-135M-Instruct GGUF) to run the HTTP tests")
    });
    let path = PathBuf::from(path);
    assert!(
        path.exists(),
        "KESTREL_DEFAULT_MODEL={} does not exist",
        path.display()
    );
    path
}

/// The runtime all test servers live on (tests have their own short-lived runtimes).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime")
    })
}

/// A new server with `opts` and `config` (each call loads the model and starts an engine).
pub fn start(opts: LaunchOptions, config: ServerConfig) -> Server {
    start_model(&model_path(), opts, config)
}

/// [`start`] on the model at `path` (a repository path, e.g. a fixture, is read from the
/// workspace root).
pub fn start_model(path: &std::path::Path, opts: LaunchOptions, config: ServerConfig) -> Server {
    let path = match path.is_relative() {
        true => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path),
        false => path.to_path_buf(),
    };
    let loaded = kestrel_model::load_model(&path).expect("load the model");
    // Each engine gets its own pool: two engines must not share workers.
    let pool: &'static ThreadPool = Box::leak(Box::new(ThreadPool::new(2)));
    let state = kestrel_server::launch::start(loaded, &opts, pool).expect("start the engine");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("local addr");
    runtime().spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
        kestrel_server::serve_on(listener, config, state, std::future::pending()).await
    });
    Server {
        base: format!("http://{addr}"),
    }
}

/// The test servers' engine options, admitting `max_concurrent` requests.
pub fn options(max_concurrent: usize) -> LaunchOptions {
    LaunchOptions {
        max_num_seqs: 32,
        max_num_batched_tokens: 512,
        block_size: 16,
        kv_cache: KvBudget::Tokens(16 * 1024),
        max_concurrent_requests: Some(max_concurrent),
        max_total_tokens: Some(2048),
        max_input_tokens: Some(1536),
        ..LaunchOptions::default()
    }
}

/// The shared server: no key, 64 concurrent requests.
pub fn main_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| start(options(64), ServerConfig::default()))
}

/// A server that requires [`KEY`].
pub fn keyed_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let config = ServerConfig {
            api_keys: vec![KEY.into()],
            body_limit: 64 * 1024,
            ..ServerConfig::default()
        };
        start(options(8), config)
    })
}

/// A server run with `--strict-api` (unknown request fields are refused).
pub fn strict_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let config = ServerConfig {
            strict_api: true,
            ..ServerConfig::default()
        };
        start(options(8), config)
    })
}

/// A server that admits only two requests at once (for 429 and disconnect tests; used by one
/// test only so nothing else runs on it).
pub fn small_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| start(options(2), ServerConfig::default()))
}

/// A server that reads replies in the Hermes tool-call format (`--tool-call-parser hermes`).
pub fn hermes_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let opts = LaunchOptions {
            tool_call_parser: Some(kestrel_server::tools::ToolCallFormat::Hermes),
            ..options(8)
        };
        start(opts, ServerConfig::default())
    })
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client")
}

/// POSTs JSON and returns status and parsed body.
pub async fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let resp = client()
        .post(format!("{}{path}", server.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path} returned non-JSON ({e}): {text}"));
    (status, value)
}

/// POSTs raw bytes.
pub async fn post_raw(server: &Server, path: &str, body: Vec<u8>) -> (u16, String) {
    let resp = client()
        .post(format!("{}{path}", server.base))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// GETs a path as text.
pub async fn get(server: &Server, path: &str) -> (u16, String) {
    let resp = client()
        .get(format!("{}{path}", server.base))
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// POSTs a streaming request and returns its whole SSE body, checking the status, the content
/// type and that the body ends with a blank line.
pub async fn sse_text(server: &Server, path: &str, body: &Value) -> String {
    let resp = client()
        .post(format!("{}{path}", server.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200, "{path} stream status");
    let ct = resp.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .to_string();
    assert!(ct.starts_with("text/event-stream"), "content type {ct}");
    resp.text().await.expect("body")
}

/// POSTs a streaming request and returns the `data:` payloads.
pub async fn stream(server: &Server, path: &str, body: &Value) -> Vec<String> {
    sse_payloads(&sse_text(server, path, body).await)
}

/// POSTs a streaming request and returns its named events: `(event, data)`, checking that each
/// event's name is its data's `type` (Anthropic's and the Responses API's streams).
pub async fn named_events(server: &Server, path: &str, body: &Value) -> Vec<(String, Value)> {
    let text = sse_text(server, path, body).await;
    assert!(
        text.ends_with("\n\n"),
        "SSE body must end with a blank line: {text:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e
                .strip_prefix("event: ")
                .and_then(|e| e.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not a named event: {e:?}"));
            let data: Value = serde_json::from_str(data).expect("event data is JSON");
            assert_eq!(data["type"], name, "{e}");
            (name.to_string(), data)
        })
        .collect()
}

/// Splits an SSE body into its `data:` payloads, checking the framing.
pub fn sse_payloads(text: &str) -> Vec<String> {
    assert!(
        text.ends_with("\n\n"),
        "SSE body must end with a blank line: {text:?}"
    );
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                .to_string()
        })
        .collect()
}

/// The value of an unlabelled series in Prometheus text, if present.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        (series == name).then(|| value.parse().ok()).flatten()
    })
}
