//! A tiny in-process OpenAI-style streaming server for the integration tests.
//!
//! It listens on 127.0.0.1:0, serves `GET /v1/models` and streams SSE for
//! `POST /v1/completions` and `POST /v1/chat/completions` with known, injected delays: the
//! first content chunk after `first_delay`, each later one after `token_delay`. Per request it
//! follows the next entry of `behaviors` (cycled in arrival order), so tests can inject HTTP
//! errors, mid-stream error events and hangs. Chat usage reports every message but the last
//! as cached (a perfect prefix cache).

// Each test binary uses a different subset of this shared module.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

/// What the server does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// Stream normally.
    Stream,
    /// Answer with this HTTP status and a JSON error body.
    Status(u16),
    /// Send one content chunk, then an `{"error": ...}` event, then close.
    ErrorEvent,
    /// Send nothing for a minute.
    Hang,
}

/// Shape of the fake streams.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    pub first_delay: Duration,
    pub token_delay: Duration,
    /// Content chunks per response.
    pub chunks: usize,
    /// Tokens each content chunk claims (reflected in usage.completion_tokens).
    pub tokens_per_chunk: usize,
    /// Send a usage chunk before `[DONE]`.
    pub usage: bool,
    /// Write every content chunk in two pieces, 3 ms apart.
    pub split_writes: bool,
    pub behaviors: Vec<Behavior>,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            first_delay: Duration::from_millis(150),
            token_delay: Duration::from_millis(40),
            chunks: 6,
            tokens_per_chunk: 1,
            usage: true,
            split_writes: false,
            behaviors: vec![Behavior::Stream],
        }
    }
}

struct Fake {
    config: FakeConfig,
    arrivals: AtomicUsize,
    bodies: Mutex<Vec<Value>>,
}

/// A running fake server.
pub struct FakeServer {
    pub base_url: String,
    state: Arc<Fake>,
}

impl FakeServer {
    /// Request bodies received so far, in arrival order.
    pub fn bodies(&self) -> Vec<Value> {
        self.state.bodies.lock().unwrap().clone()
    }
}

/// Starts a server on an ephemeral loopback port.
pub async fn start(config: FakeConfig) -> FakeServer {
    let state = Arc::new(Fake {
        config,
        arrivals: AtomicUsize::new(0),
        bodies: Mutex::new(vec![]),
    });
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(generate))
        .route("/v1/chat/completions", post(generate))
        .with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    FakeServer {
        base_url: format!("http://{addr}"),
        state,
    }
}

async fn models() -> Response {
    let body = json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]});
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn generate(State(fake): State<Arc<Fake>>, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    let n = fake.arrivals.fetch_add(1, Ordering::SeqCst);
    let behaviors = &fake.config.behaviors;
    let behavior = behaviors[n % behaviors.len()];
    let chat = body.get("messages").is_some();
    let words = |v: &Value| v.as_str().unwrap_or("").split_whitespace().count();
    let (prompt_words, cached_words) = match body["messages"].as_array() {
        // A perfect prefix cache: every message but the last one was seen before.
        Some(messages) => {
            let per: Vec<usize> = messages.iter().map(|m| words(&m["content"])).collect();
            let total: usize = per.iter().sum();
            (total, total - per.last().copied().unwrap_or(0))
        }
        None => (words(&body["prompt"]), 0),
    };
    fake.bodies.lock().unwrap().push(body);
    if let Behavior::Status(code) = behavior {
        let err = json!({"error": {"code": code, "message": format!("injected {code}: rate limited or broken")}});
        return Response::builder()
            .status(StatusCode::from_u16(code).unwrap())
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(err.to_string()))
            .unwrap();
    }
    let steps = sse_steps(&fake.config, chat, (prompt_words, cached_words), behavior);
    let body = stream::iter(steps).then(|(delay, bytes)| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(Bytes::from(bytes))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap()
}

fn event(v: &Value) -> Vec<u8> {
    format!("data: {v}\n\n").into_bytes()
}

fn content_chunk(chat: bool, text: &str) -> Value {
    if chat {
        json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
    } else {
        json!({"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": null}]})
    }
}

/// The (delay before write, bytes) plan of one streamed response.
fn sse_steps(
    c: &FakeConfig,
    chat: bool,
    (prompt_words, cached_words): (usize, usize),
    behavior: Behavior,
) -> Vec<(Duration, Vec<u8>)> {
    let zero = Duration::ZERO;
    if behavior == Behavior::Hang {
        return vec![(Duration::from_secs(60), b"data: [DONE]\n\n".to_vec())];
    }
    let mut steps = vec![(zero, b": connected\n\n".to_vec())];
    if chat {
        let role =
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]});
        steps.push((zero, event(&role)));
    }
    for i in 0..c.chunks {
        let delay = if i == 0 { c.first_delay } else { c.token_delay };
        let bytes = event(&content_chunk(chat, &" tok".repeat(c.tokens_per_chunk)));
        if c.split_writes {
            let (a, b) = bytes.split_at(bytes.len() / 2);
            steps.push((delay, a.to_vec()));
            steps.push((Duration::from_millis(3), b.to_vec()));
        } else {
            steps.push((delay, bytes));
        }
        if behavior == Behavior::ErrorEvent {
            steps.push((
                zero,
                event(&json!({"error": {"message": "injected mid-stream failure"}})),
            ));
            return steps;
        }
    }
    let last = if chat {
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    } else {
        json!({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    };
    steps.push((zero, event(&last)));
    if c.usage {
        let usage = json!({"choices": [], "usage": {"prompt_tokens": prompt_words,
            "completion_tokens": c.chunks * c.tokens_per_chunk, "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": cached_words}}});
        steps.push((zero, event(&usage)));
    }
    steps.push((zero, b"data: [DONE]\n\n".to_vec()));
    steps
}
