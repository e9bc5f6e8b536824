//! What travels with a request through the fleet besides its prompt: the `X-Request-Id` (echoed
//! by the gateway on every response, named in its error bodies and in the worker's log lines
//! for the job) and the first-token objective (`ttft_slo_ms` or `X-TTFT-SLO-Ms`), which the
//! worker's engine checks at admission: a predicted miss is a 429 from the gateway, as on
//! `kestrel serve`.

use crate::fleet_common;

use std::time::Duration;

use fleet_common::*;
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(180);

/// A worker whose log is JSON lines at `info`.
fn logged_worker(redis: &Redis, id: &str) -> Proc {
    let env = [("KESTREL_LOG", "info"), ("KESTREL_LOG_FORMAT", "json")];
    worker_with_env(redis, id, &[], &env).0
}

/// The worker's log lines (JSON) whose `job` span names `request_id`.
fn job_lines(worker: &str, request_id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(log_path(worker)).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["span"]["name"] == "job" && v["span"]["request_id"] == request_id)
        .collect()
}

fn is_generated_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Response {
    request_with(addr, "POST", path, headers, &body.to_string(), LONG).unwrap()
}

#[test]
fn request_ids_are_echoed_by_the_gateway_and_logged_by_the_worker() {
    let redis = Redis::start();
    let (_gw, addr) = gateway(&redis, &[]);
    let body = json!({"prompt": "Hello", "max_tokens": 4, "temperature": 0.0});

    // Before any worker: the 503 carries the client's id too.
    let early = post(
        &addr,
        "/v1/completions",
        &[("X-Request-Id", "abc-early")],
        &body,
    );
    assert_eq!(early.status, 503, "{}", early.body);
    assert_eq!(early.header("x-request-id").as_deref(), Some("abc-early"));
    assert_eq!(early.json()["error"]["request_id"], "abc-early");

    let _w = logged_worker(&redis, "w-ids");
    wait_workers(&addr, 1, LONG);

    let ok = post(&addr, "/v1/completions", &[("X-Request-Id", "abc")], &body);
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.header("x-request-id").as_deref(), Some("abc"));

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let sse = post(
        &addr,
        "/v1/completions",
        &[("X-Request-Id", "abc-sse")],
        &streamed,
    );
    assert_eq!(sse.header("x-request-id").as_deref(), Some("abc-sse"));
    assert!(!completion_text(&sse, true).is_empty(), "{}", sse.body);

    let mut bad = body.clone();
    bad["temperature"] = json!(5.0);
    let refused = post(
        &addr,
        "/v1/completions",
        &[("X-Request-Id", "abc-400")],
        &bad,
    );
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.header("x-request-id").as_deref(), Some("abc-400"));
    assert_eq!(refused.json()["error"]["request_id"], "abc-400");

    // Not visible ASCII: replaced by a generated id, which the worker logs instead.
    let replaced = post(
        &addr,
        "/v1/completions",
        &[("X-Request-Id", "two words")],
        &body,
    );
    assert_eq!(replaced.status, 200, "{}", replaced.body);
    let generated = replaced.header("x-request-id").expect("an id");
    assert!(is_generated_id(&generated), "{generated}");

    for id in ["abc", "abc-sse", generated.as_str()] {
        wait_for(Duration::from_secs(10), "the worker's log line", || {
            !job_lines("w-ids", id).is_empty()
        });
        let lines = job_lines("w-ids", id);
        assert!(
            lines.iter().any(|l| l["message"] == "running a job"),
            "{lines:?}"
        );
    }
    let text = std::fs::read_to_string(log_path("w-ids")).unwrap();
    assert!(
        !text.contains("two words"),
        "the unusable id never reaches the worker"
    );
}

/// Counter `name` of a scrape of `addr`'s `/metrics` (0 when absent).
fn counter(addr: &str, name: &str) -> f64 {
    let scrape = request(addr, "GET", "/metrics", "", LONG).unwrap().body;
    metric(&scrape, name).unwrap_or(0.0)
}

fn assert_slo_refusal(r: &Response, request_id: &str) {
    assert_eq!(r.status, 429, "{}", r.body);
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.header("x-request-id").as_deref(), Some(request_id));
}

#[test]
fn first_token_objectives_reach_the_worker_and_a_predicted_miss_is_a_429() {
    let redis = Redis::start();
    let (_w, metrics_addr) = worker(&redis, "w-slo", &[]);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 1, LONG);
    let completion = |slo: Option<u64>, stream: bool| {
        // `ignore_eos`: the text must not be empty whatever the greedy first tokens are.
        let mut body = json!({"prompt": "Write a haiku about rain.", "max_tokens": 6,
                              "ignore_eos": true, "temperature": 0.0, "stream": stream});
        if let Some(ms) = slo {
            body["ttft_slo_ms"] = json!(ms);
        }
        body
    };
    // The engine predicts only once it has measured its steps.
    let warm = post(&addr, "/v1/completions", &[], &completion(None, false));
    assert_eq!(warm.status, 200, "{}", warm.body);

    // Generous objectives, in the body and in the header, are admitted and met.
    let met = "kestrel:requests_slo_met_total";
    let met_before = counter(&metrics_addr, met);
    let body_slo = post(
        &addr,
        "/v1/completions",
        &[],
        &completion(Some(60_000), false),
    );
    assert_eq!(body_slo.status, 200, "{}", body_slo.body);
    let header = [("X-TTFT-SLO-Ms", "60000")];
    let header_slo = post(&addr, "/v1/completions", &header, &completion(None, true));
    assert!(!completion_text(&header_slo, true).is_empty());
    assert_eq!(
        counter(&metrics_addr, met) - met_before,
        2.0,
        "both objectives reached the worker's engine"
    );

    // Keep the worker decoding a long request: a 1 ms objective cannot be met behind it.
    let busy = {
        let addr = addr.clone();
        let body = json!({"prompt": "Count from one to one thousand:", "max_tokens": 400,
                          "ignore_eos": true, "temperature": 0.0});
        std::thread::spawn(move || post(&addr, "/v1/completions", &[], &body))
    };
    let running = "kestrel:num_requests_running";
    wait_for(LONG, "the long request to run", || {
        counter(&metrics_addr, running) >= 1.0
    });
    let rejected = "kestrel:requests_slo_rejected_total";
    let rejected_before = counter(&metrics_addr, rejected);

    let one_ms = [("X-TTFT-SLO-Ms", "1"), ("X-Request-Id", "slo-header")];
    let r = post(&addr, "/v1/completions", &one_ms, &completion(None, false));
    assert_slo_refusal(&r, "slo-header");
    let error = &r.json()["error"];
    assert_eq!(error["type"], "rate_limit_error", "{error}");
    assert_eq!(error["code"], "ttft_slo_unattainable", "{error}");
    assert_eq!(error["param"], "ttft_slo_ms", "{error}");
    assert_eq!(error["request_id"], "slo-header", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("objective of 1 ms"),
        "{error}"
    );

    let id = [("X-Request-Id", "slo-body")];
    let r = post(&addr, "/v1/completions", &id, &completion(Some(1), false));
    assert_slo_refusal(&r, "slo-body");
    // A stream is refused before it starts.
    let id = [("X-Request-Id", "slo-stream")];
    let r = post(&addr, "/v1/completions", &id, &completion(Some(1), true));
    assert_slo_refusal(&r, "slo-stream");
    assert_eq!(r.json()["error"]["code"], "ttft_slo_unattainable");
    let tgi = json!({"inputs": "Hello there", "parameters": {"max_new_tokens": 4}});
    let id = [("X-Request-Id", "slo-tgi"), ("X-TTFT-SLO-Ms", "1")];
    let r = post(&addr, "/generate", &id, &tgi);
    assert_slo_refusal(&r, "slo-tgi");
    assert_eq!(r.json()["error_type"], "overloaded", "{}", r.body);

    assert_eq!(
        counter(&metrics_addr, rejected) - rejected_before,
        4.0,
        "the worker's engine refused all four"
    );
    let long = busy.join().unwrap();
    assert_eq!(long.status, 200, "{}", long.body);
    assert_eq!(redis.pending(), 0, "refused jobs are acknowledged");
}
