//! First-token objectives over HTTP: a burst against a tiny `ttft_slo_ms` (or `X-TTFT-SLO-Ms`)
//! gets 429s with `Retry-After` while requests without one all succeed, streaming and TGI
//! requests are refused before their response starts, and the goodput counters agree with
//! what the clients saw.

use std::sync::OnceLock;

use futures_util::future::join_all;
use kestrel_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{self, Server};

/// A server of its own, so that no other test's requests move its counters.
fn slo_server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| common::start(common::options(64), ServerConfig::default()))
}

/// What a client saw: status, `Retry-After` and body.
struct Seen {
    status: u16,
    retry_after: Option<u64>,
    body: Value,
}

async fn send(path: &str, body: Value, header: Option<&str>) -> Seen {
    let mut req = common::client()
        .post(format!("{}{path}", slo_server().base))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(h) = header {
        req = req.header("X-TTFT-SLO-Ms", h);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().expect("ascii").parse().expect("whole seconds"));
    let text = resp.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Seen {
        status,
        retry_after,
        body,
    }
}

fn completion(i: usize, slo_ms: Option<u64>) -> Value {
    let mut body = json!({
        "prompt": format!("Request number {i} asks for a short story about a lighthouse keeper"),
        "max_tokens": 8,
        "temperature": 0.0,
    });
    if let Some(ms) = slo_ms {
        body["ttft_slo_ms"] = json!(ms);
    }
    body
}

/// The value of counter `name` in the exposition (0 when it was never incremented).
async fn counter(name: &str) -> u64 {
    let text = common::client()
        .get(format!("{}/metrics", slo_server().base))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("exposition");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse::<f64>().expect("a number") as u64)
}

struct Counters {
    met: u64,
    missed: u64,
    rejected: u64,
}

async fn counters() -> Counters {
    Counters {
        met: counter("kestrel:requests_slo_met_total").await,
        missed: counter("kestrel:requests_slo_missed_total").await,
        rejected: counter("kestrel:requests_slo_rejected_total").await,
    }
}

fn assert_refused(seen: &Seen) {
    assert_eq!(seen.status, 429, "{}", seen.body);
    let retry = seen.retry_after.expect("a 429 carries Retry-After");
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_against_a_tiny_objective_is_refused_and_counted() {
    // Measure the engine's step costs first: without them it cannot predict.
    let warm = send("/v1/completions", completion(0, None), None).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    let before = counters().await;

    // 24 requests at once: a third without an objective, a third with 1 ms (in the body, or
    // the header), a third with a minute.
    let burst = (1..=24).map(|i| async move {
        let seen = match i % 3 {
            0 => send("/v1/completions", completion(i, None), None).await,
            1 if i % 2 == 0 => send("/v1/completions", completion(i, None), Some("1")).await,
            1 => send("/v1/completions", completion(i, Some(1)), None).await,
            _ => send("/v1/completions", completion(i, Some(60_000)), None).await,
        };
        (i % 3, seen)
    });
    let results = join_all(burst).await;

    let mut refused = 0;
    let mut admitted_with_objective = 0;
    for (kind, seen) in &results {
        match kind {
            0 => assert_eq!(seen.status, 200, "no objective: {}", seen.body),
            2 => {
                assert_eq!(seen.status, 200, "a minute is plenty: {}", seen.body);
                admitted_with_objective += 1;
            }
            _ if seen.status == 429 => {
                assert_refused(seen);
                let error = &seen.body["error"];
                assert_eq!(error["type"], "rate_limit_error", "{error}");
                assert_eq!(error["code"], "ttft_slo_unattainable", "{error}");
                assert_eq!(error["param"], "ttft_slo_ms", "{error}");
                let message = error["message"].as_str().expect("message");
                assert!(message.contains("objective of 1 ms"), "{message}");
                refused += 1;
            }
            _ => {
                assert_eq!(seen.status, 200, "{}", seen.body);
                admitted_with_objective += 1;
            }
        }
    }
    assert!(refused > 0, "a 1 ms objective behind a burst is refused");

    // Streaming and TGI requests are refused before their response starts.
    let mut stream = completion(99, Some(1));
    stream["stream"] = json!(true);
    let seen = send("/v1/completions", stream, None).await;
    assert_refused(&seen);
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                      "ttft_slo_ms": 1});
    let seen = send("/v1/chat/completions", chat, None).await;
    assert_refused(&seen);
    let tgi = json!({"inputs": "Hello there", "parameters": {"max_new_tokens": 4,
                     "ttft_slo_ms": 1}});
    let seen = send("/generate", tgi, None).await;
    assert_refused(&seen);
    assert_eq!(seen.body["error_type"], "overloaded", "{}", seen.body);
    refused += 3;

    let after = counters().await;
    assert_eq!(after.rejected - before.rejected, refused as u64);
    assert_eq!(
        (after.met - before.met) + (after.missed - before.missed),
        admitted_with_objective,
        "each admitted request with an objective is counted met or missed once"
    );
    assert!(
        after.met - before.met >= 8,
        "the one-minute objectives were met"
    );
}

#[tokio::test]
async fn bad_objectives_are_refused_naming_them() {
    let seen = send("/v1/completions", completion(1, Some(0)), None).await;
    assert_eq!(seen.status, 400, "{}", seen.body);
    assert_eq!(seen.body["error"]["param"], "ttft_slo_ms");
    let seen = send("/v1/completions", completion(1, None), Some("soon")).await;
    assert_eq!(seen.status, 400, "{}", seen.body);
    assert_eq!(seen.body["error"]["param"], "X-TTFT-SLO-Ms");
    let tgi = json!({"inputs": "Hi", "parameters": {"ttft_slo_ms": -3}});
    let seen = send("/generate", tgi, None).await;
    assert_eq!(seen.status, 422, "{}", seen.body);
}
