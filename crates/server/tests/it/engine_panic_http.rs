//! When the engine thread panics, HTTP clients see it: a stream in flight ends with an error
//! event instead of a normal finish and `[DONE]`, a plain request gets a 5xx, new requests are
//! refused, and readiness fails (503) while liveness still answers, so an orchestrator replaces
//! the process.
//!
//! The server runs on the default model's tokenizer and limits, but its engine executes a
//! [`MockExecutor`] that panics at a chosen step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kestrel_engine::executor::{BatchInput, BatchOutput, Executor, ExecutorError, KvGeometry};
use kestrel_engine::handle::EngineHandle;
use kestrel_engine::mock_executor::MockExecutor;
use kestrel_model::ThreadPool;
use kestrel_server::launch::start_engine;
use kestrel_server::state::AppState;
use kestrel_server::ServerConfig;
use serde_json::json;

use crate::common;

/// Panics on the `panic_at`-th step (counting from 0).
struct PanickingExecutor {
    inner: MockExecutor,
    steps: Arc<AtomicU64>,
    panic_at: u64,
}

impl Executor for PanickingExecutor {
    fn execute(&mut self, input: &BatchInput) -> Result<BatchOutput, ExecutorError> {
        let step = self.steps.fetch_add(1, Ordering::SeqCst);
        assert!(step != self.panic_at, "injected engine panic");
        self.inner.execute(input)
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn kv_geometry(&self) -> KvGeometry {
        self.inner.kv_geometry()
    }
}

/// A server whose engine panics at step `panic_at`; returns its base URL and the step counter.
fn panicking_server(panic_at: u64) -> (String, Arc<AtomicU64>) {
    let path = std::env::var_os("KESTREL_DEFAULT_MODEL").expect("KESTREL_DEFAULT_MODEL is set");
    let loaded = kestrel_model::load_model(std::path::Path::new(&path)).expect("load the model");
    let pool: &'static ThreadPool = Box::leak(Box::new(ThreadPool::new(1)));
    let launched = start_engine(loaded, &common::options(8), pool).expect("start");
    let config = launched.engine.config().clone();
    let vocab = launched.engine.limits().vocab_size;
    launched.engine.shutdown(Duration::from_secs(5));
    let steps = Arc::new(AtomicU64::new(0));
    let exec = PanickingExecutor {
        inner: MockExecutor::new(256, 16, vocab),
        steps: steps.clone(),
        panic_at,
    };
    let tokenizer = launched.model.tokenizer.clone();
    let eos = tokenizer.eos_ids().to_vec();
    let engine = EngineHandle::start(Box::new(exec), tokenizer, eos, config);
    let state = AppState::new(
        Arc::new(engine),
        launched.model,
        launched.limits,
        launched.metrics,
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            kestrel_server::serve_on(
                listener,
                ServerConfig::default(),
                state,
                std::future::pending(),
            )
            .await
        })
    });
    (format!("http://{addr}"), steps)
}

async fn get_status(base: &str, path: &str) -> u16 {
    common::get(&server(base), path).await.0
}

async fn post(base: &str, path: &str, body: &serde_json::Value) -> (u16, String) {
    common::post_raw(&server(base), path, body.to_string().into_bytes()).await
}

fn server(base: &str) -> common::Server {
    common::Server {
        base: base.to_string(),
    }
}

#[tokio::test]
async fn a_stream_in_flight_ends_with_an_error_event_and_readiness_fails() {
    let (base, steps) = panicking_server(5);
    assert_eq!(get_status(&base, "/health").await, 200, "ready before");
    let body = json!({
        "prompt": "Once upon a time", "max_tokens": 40,
        "ignore_eos": true, "stream": true
    });
    let text = common::client()
        .post(format!("{base}/v1/completions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("response")
        .text()
        .await
        .expect("body");
    assert!(
        steps.load(Ordering::SeqCst) > 5,
        "the engine reached step 5"
    );
    let payloads = common::sse_payloads(&text);
    let last_data = payloads
        .iter()
        .rev()
        .find(|p| *p != "[DONE]")
        .expect("events");
    let event: serde_json::Value = serde_json::from_str(last_data).expect("json event");
    let message = event["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "no error event at the end: {text}");
    let finished_normally = payloads.iter().any(|p| {
        serde_json::from_str::<serde_json::Value>(p)
            .ok()
            .and_then(|v| v["choices"][0]["finish_reason"].as_str().map(String::from))
            .is_some_and(|r| r == "length" || r == "stop")
    });
    assert!(
        !finished_normally,
        "the stream claims a normal finish: {text}"
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    while get_status(&base, "/health").await != 503 {
        assert!(
            Instant::now() < deadline,
            "readiness still passes after the panic"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get_status(&base, "/health/live").await, 200, "liveness");
    let (status, reply) = post(
        &base,
        "/v1/completions",
        &json!({
            "prompt": "again", "max_tokens": 4
        }),
    )
    .await;
    assert!(
        status >= 500,
        "a request after the panic got {status}: {reply}"
    );
}

#[tokio::test]
async fn a_plain_request_in_flight_gets_a_server_error() {
    let (base, _) = panicking_server(3);
    let (status, reply) = post(
        &base,
        "/v1/completions",
        &json!({
            "prompt": "Hello there", "max_tokens": 30, "ignore_eos": true
        }),
    )
    .await;
    assert!(status >= 500, "got {status}: {reply}");
    let v: serde_json::Value = serde_json::from_str(&reply).expect("json error body");
    assert!(v["error"]["message"].is_string(), "{reply}");
}
