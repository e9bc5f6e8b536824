//! HTTP side: request bodies, one streamed request, and model discovery.

use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Client;
use serde_json::{json, Value};

use crate::chunk::clip;
use crate::error::BenchError;
use crate::measure::{Streamed, Tracker};
use crate::outcome::{RequestFailure, RequestOutcome};
use crate::plan::ApiKind;
use crate::prompts::PromptSpec;

/// Longest wait for `GET /v1/models` during model discovery.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for the end of the body after `[DONE]`.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Everything a request needs besides its prompt; shared by all request tasks.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub client: Client,
    pub url: String,
    pub api: ApiKind,
    pub model: String,
    pub api_key: Option<String>,
    pub min_tokens: Option<u32>,
    /// Sent as `ignore_eos`: every request generates exactly its `output_len` tokens.
    pub ignore_eos: bool,
    pub timeout: Duration,
    /// Sent as `ttft_slo_ms` when set.
    pub ttft_slo_ms: Option<u64>,
}

/// Builds the HTTP client: a pool sized to the load (`max_in_flight` requests), no proxy (a
/// proxy would distort latency).
pub(crate) fn build_client(max_in_flight: usize, timeout: Duration) -> Result<Client, BenchError> {
    Client::builder()
        .pool_max_idle_per_host(max_in_flight)
        .tcp_nodelay(true)
        .connect_timeout(timeout)
        .no_proxy()
        .build()
        .map_err(BenchError::Client)
}

/// The streaming request body for one prompt.
pub(crate) fn request_body(target: &Target, prompt: &PromptSpec) -> Value {
    match target.api {
        ApiKind::Completions => {
            let mut body = base_body(target, prompt.output_len);
            body["prompt"] = json!(prompt.text);
            body
        }
        ApiKind::Chat => chat_body(
            target,
            json!([{ "role": "user", "content": prompt.text }]),
            prompt.output_len,
        ),
    }
}

/// The streaming chat request body for a whole `messages` array.
pub(crate) fn chat_body(target: &Target, messages: Value, max_tokens: u32) -> Value {
    let mut body = base_body(target, max_tokens);
    body["messages"] = messages;
    body
}

/// The fields every request carries: greedy sampling, streaming with usage, the options.
fn base_body(target: &Target, max_tokens: u32) -> Value {
    let mut body = json!({
        "model": target.model,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": target.ignore_eos,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    if let Some(min) = target.min_tokens {
        body["min_tokens"] = json!(min);
    }
    if let Some(ms) = target.ttft_slo_ms {
        body["ttft_slo_ms"] = json!(ms);
    }
    body
}

/// Sends one request and measures its stream; never returns early on failure.
pub(crate) async fn send_one(target: &Target, prompt: &PromptSpec) -> RequestOutcome {
    let body = request_body(target, prompt);
    send_body(target, &body, prompt.est_prompt_tokens)
        .await
        .map(|s| s.measured)
}

/// Sends a prepared request body (see [`request_body`], [`chat_body`]) and measures its stream,
/// keeping the reply text; bounded by the target's timeout.
pub(crate) async fn send_body(
    target: &Target,
    body: &Value,
    est_prompt_tokens: u64,
) -> Result<Streamed, RequestFailure> {
    let streamed = stream_one(target, body.to_string(), est_prompt_tokens);
    match tokio::time::timeout(target.timeout, streamed).await {
        Ok(outcome) => outcome,
        Err(_) => Err(RequestFailure::Timeout(target.timeout)),
    }
}

async fn stream_one(
    target: &Target,
    body: String,
    est_prompt_tokens: u64,
) -> Result<Streamed, RequestFailure> {
    let (mut resp, start, retried) = send_with_retry(target, body).await?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return Err(RequestFailure::Http {
            status: status.as_u16(),
            body: clip(text.trim()),
        });
    }
    let mut tracker = Tracker::new(start, est_prompt_tokens, retried);
    let mut parser = crate::sse::SseParser::new();
    while !tracker.is_done() {
        let Some(bytes) = resp.chunk().await.map_err(transport)? else {
            if let Some(payload) = parser.finish() {
                tracker.on_payload(&payload, Instant::now())?;
            }
            break;
        };
        let at = Instant::now();
        for payload in parser.feed(&bytes) {
            tracker.on_payload(&payload, at)?;
        }
    }
    drain(&mut resp).await;
    tracker.finish()
}

/// Reads what follows `[DONE]` (normally just the end of the chunked body) so the connection
/// can return to the pool; gives up after [`DRAIN_GRACE`] so a server that keeps the stream open
/// cannot stall the run. Latency was already taken at `[DONE]`.
async fn drain(resp: &mut reqwest::Response) {
    let read_rest = async { while let Ok(Some(_)) = resp.chunk().await {} };
    // A timeout here only means the connection is dropped instead of reused.
    let _ = tokio::time::timeout(DRAIN_GRACE, read_rest).await;
}

/// Sends the request; returns the response, the instant it was sent and whether it was retried.
///
/// Some servers (llama.cpp's among them) close a keep-alive connection right after a streamed
/// response. A request written to such a pooled connection before its close was noticed fails
/// with no response; it is sent once more, with a fresh clock, on a new connection. Connect
/// errors and timeouts are not retried.
async fn send_with_retry(
    target: &Target,
    body: String,
) -> Result<(reqwest::Response, Instant, bool), RequestFailure> {
    let start = Instant::now();
    match build_request(target, body.clone()).send().await {
        Ok(resp) => Ok((resp, start, false)),
        Err(e) if e.is_request() && !e.is_connect() && !e.is_timeout() => {
            let start = Instant::now();
            let resp = build_request(target, body)
                .send()
                .await
                .map_err(transport)?;
            Ok((resp, start, true))
        }
        Err(e) => Err(transport(e)),
    }
}

fn build_request(target: &Target, body: String) -> reqwest::RequestBuilder {
    let req = target
        .client
        .post(&target.url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .body(body);
    match &target.api_key {
        Some(key) => req.bearer_auth(key),
        None => req,
    }
}

fn transport(e: reqwest::Error) -> RequestFailure {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    RequestFailure::Transport(msg)
}

/// The first model id from `GET {base}/v1/models`, or `"default"` when that fails.
pub(crate) async fn discover_model(
    client: &Client,
    base_url: &str,
    api_key: Option<&str>,
) -> String {
    let mut req = client
        .get(format!("{base_url}/v1/models"))
        .timeout(DISCOVERY_TIMEOUT);
    if let Some(key) = api_key {
        req = req.bearer_auth(key);
    }
    let first_id = async {
        let resp = req.send().await.ok()?.error_for_status().ok()?;
        let v: Value = serde_json::from_slice(&resp.bytes().await.ok()?).ok()?;
        v["data"][0]["id"].as_str().map(str::to_owned)
    };
    first_id.await.unwrap_or_else(|| "default".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(api: ApiKind, min_tokens: Option<u32>) -> Target {
        Target {
            client: Client::new(),
            url: "http://127.0.0.1:1/v1/completions".into(),
            api,
            model: "m".into(),
            api_key: None,
            min_tokens,
            ignore_eos: min_tokens.is_none(),
            timeout: Duration::from_secs(1),
            ttft_slo_ms: None,
        }
    }

    fn prompt() -> PromptSpec {
        PromptSpec {
            text: "a b".into(),
            output_len: 32,
            est_prompt_tokens: 2,
        }
    }

    #[test]
    fn completions_body() {
        let b = request_body(&target(ApiKind::Completions, None), &prompt());
        assert_eq!(b["prompt"], "a b");
        assert_eq!(b["model"], "m");
        assert_eq!(b["max_tokens"], 32);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert!(b.get("messages").is_none() && b.get("min_tokens").is_none());
    }

    #[test]
    fn chat_body_with_min_tokens() {
        let b = request_body(&target(ApiKind::Chat, Some(32)), &prompt());
        assert_eq!(b["messages"][0]["role"], "user");
        assert_eq!(b["messages"][0]["content"], "a b");
        assert_eq!(b["min_tokens"], 32);
        assert_eq!(
            b["ignore_eos"], false,
            "the target stops at end of sequence"
        );
        assert!(b.get("prompt").is_none());
    }
}
