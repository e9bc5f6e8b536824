//! The fleet end to end: a real Redis, real `kestrel gateway` and `kestrel worker` processes,
//! checked against a real `kestrel serve` on the same model.

use crate::fleet_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet_common::*;

const LONG: Duration = Duration::from_secs(180);

#[test]
fn a_worker_killed_mid_stream_costs_no_request_and_no_token() {
    let max_tokens = 32;
    let prompts = prompts();
    let expected = Arc::new(reference_texts(&prompts, max_tokens));
    let redis = Redis::start();
    // Eight sequences each: most requests wait in Redis, so both workers take work.
    let (mut doomed, doomed_metrics) = worker(&redis, "w-doomed", &["--max-num-seqs", "8"]);
    let (_survivor, _) = worker(&redis, "w-survivor", &["--max-num-seqs", "8"]);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 2, LONG);

    let clients: Vec<_> = (0..64)
        .map(|i| {
            let prompt = prompts[i % prompts.len()].clone();
            let stream = i % 2 == 0;
            let priority = [-1, 0, 1][i % 3];
            let addr = addr.clone();
            std::thread::spawn(move || {
                let body = completion_body(&prompt, max_tokens, stream, priority);
                let r = request(&addr, "POST", "/v1/completions", &body, LONG).unwrap();
                (prompt, stream, r)
            })
        })
        .collect();
    // Kill one worker in the middle of its streams.
    wait_for(LONG, "tokens from the doomed worker", || {
        let scrape = request(&doomed_metrics, "GET", "/metrics", "", LONG)
            .map(|r| r.body)
            .unwrap_or_default();
        metric(&scrape, "kestrel:generation_tokens_total").unwrap_or(0.0) > 40.0
            && metric(&scrape, "kestrel:num_requests_running").unwrap_or(0.0) > 0.0
    });
    doomed.kill();
    for c in clients {
        let (prompt, stream, r) = c.join().unwrap();
        let text = completion_text(&r, stream);
        assert_eq!(
            text, expected[&prompt],
            "prompt {prompt:?} (stream {stream})"
        );
    }
    let scrape = request(&addr, "GET", "/metrics", "", LONG).unwrap().body;
    let redelivered = metric(&scrape, "kestrel:gateway_redeliveries_total").unwrap_or(0.0);
    assert!(
        redelivered >= 1.0,
        "the kill hit no request in flight:\n{scrape}"
    );
    wait_for(LONG, "no pending entries", || redis.pending() == 0);
}

#[test]
fn cancelled_streams_free_their_kv_blocks_and_leave_nothing_pending() {
    let redis = Redis::start();
    let (_w1, m1) = worker(&redis, "w-c1", &[]);
    let (_w2, m2) = worker(&redis, "w-c2", &[]);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 2, LONG);
    let prompts = prompts();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..10 {
        let clients: Vec<_> = (0..20)
            .map(|i| {
                let prompt = prompts[(round * 20 + i) % prompts.len()].clone();
                let cut_after = (next() % 2000) as usize;
                let addr = addr.clone();
                std::thread::spawn(move || stream_and_hang_up(&addr, &prompt, cut_after))
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
    }
    for m in [&m1, &m2] {
        wait_for(LONG, "KV usage back to 0 on every worker", || {
            let scrape = request(m, "GET", "/metrics", "", LONG)
                .map(|r| r.body)
                .unwrap_or_default();
            metric(&scrape, "kestrel:kv_cache_usage_perc") == Some(0.0)
                && metric(&scrape, "kestrel:num_requests_running") == Some(0.0)
        });
    }
    wait_for(LONG, "no pending entries", || redis.pending() == 0);
}

/// Starts a streaming completion and closes the connection after `cut_after` bytes.
fn stream_and_hang_up(addr: &str, prompt: &str, cut_after: usize) {
    let body = completion_body(prompt, 200, true, 0);
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    let mut got = 0;
    let mut buf = [0u8; 256];
    while got < cut_after {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
}

#[test]
fn without_a_live_worker_the_gateway_answers_503_with_retry_after_at_once() {
    let redis = Redis::start();
    let (_gw, addr) = gateway(&redis, &[]);
    let body = completion_body("Hello", 4, false, 0);
    // Before any worker announced a model.
    let started = Instant::now();
    let r = request(&addr, "POST", "/v1/completions", &body, LONG).unwrap();
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    assert!(started.elapsed() < Duration::from_secs(1));
    // A worker comes and goes: its heartbeat expires, and the gateway says 503 again.
    let (mut w, _) = worker(&redis, "w-brief", &[]);
    wait_workers(&addr, 1, LONG);
    let ok = request(&addr, "POST", "/v1/completions", &body, LONG).unwrap();
    assert_eq!(ok.status, 200, "{}", ok.body);
    let models = request(&addr, "GET", "/v1/models", "", LONG)
        .unwrap()
        .json();
    assert!(
        models["data"][0]["id"]
            .as_str()
            .unwrap()
            .contains("SmolLM2"),
        "{models}"
    );
    w.kill();
    wait_workers(&addr, 0, Duration::from_secs(10));
    let started = Instant::now();
    let r = request(&addr, "POST", "/v1/completions", &body, LONG).unwrap();
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.header("retry-after").is_some());
    assert!(started.elapsed() < Duration::from_secs(1));
    let health = request(&addr, "GET", "/health", "", LONG).unwrap();
    assert_eq!(health.status, 503);
}

#[test]
fn beyond_the_queue_limit_the_gateway_answers_429_and_high_priority_goes_first() {
    let redis = Redis::start();
    let (_w, _) = worker(&redis, "w-narrow", &["--max-num-seqs", "1"]);
    let (_gw, addr) = gateway(&redis, &["--max-queue-len", "5"]);
    wait_workers(&addr, 1, LONG);
    let finished = Arc::new(std::sync::Mutex::new(Vec::new()));
    let send = |tag: &'static str, priority: i32| {
        let (addr, finished) = (addr.clone(), finished.clone());
        std::thread::spawn(move || {
            let body = completion_body("Count from one to one hundred:", 48, false, priority);
            let r = request(&addr, "POST", "/v1/completions", &body, LONG).unwrap();
            finished.lock().unwrap().push(tag);
            r
        })
    };
    // Lower values run first (vLLM's convention): the lows are 1, the high one -5.
    let lows: Vec<_> = (0..6).map(|_| send("low", 1)).collect();
    wait_for(LONG, "a queue of at least 5", || queue_depth(&addr) >= 5.0);
    let refused = request(
        &addr,
        "POST",
        "/v1/completions",
        &completion_body("x", 4, false, 0),
        LONG,
    )
    .unwrap();
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(refused.header("retry-after").is_some());
    // Room again for one, at high priority: it runs before the lows still queued.
    wait_for(LONG, "room in the queue", || queue_depth(&addr) < 5.0);
    let high = send("high", -5);
    assert_eq!(high.join().unwrap().status, 200);
    for l in lows {
        assert_eq!(l.join().unwrap().status, 200);
    }
    let order = finished.lock().unwrap().clone();
    let position = order.iter().position(|t| *t == "high").unwrap();
    assert!(
        position <= 3,
        "the high-priority request finished {position}th: {order:?}"
    );
}

#[test]
fn redis_and_gateway_restarts_lose_no_queued_or_running_request() {
    let max_tokens = 24;
    let prompts: Vec<String> = prompts().into_iter().take(8).collect();
    let expected = Arc::new(reference_texts(&prompts, max_tokens));
    let mut redis = Redis::start();
    let (_w, wm) = worker(&redis, "w-steady", &[]);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 1, LONG);
    let clients: Vec<_> = prompts
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, p)| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let r = request(
                    &addr,
                    "POST",
                    "/v1/completions",
                    &completion_body(&p, max_tokens, i % 2 == 0, 0),
                    LONG,
                )
                .unwrap();
                (p, i % 2 == 0, r)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    redis.restart();
    for c in clients {
        let (p, stream, r) = c.join().unwrap();
        assert_eq!(
            completion_text(&r, stream),
            expected[&p],
            "{p:?} across a redis restart"
        );
    }

    // A gateway killed mid-run: its clients lose their connections, but the workers finish
    // (and acknowledge) the requests, and a new gateway serves at once.
    let (mut gw2, addr2) = gateway(&redis, &[]);
    wait_workers(&addr2, 1, LONG);
    let orphans: Vec<_> = prompts
        .iter()
        .cloned()
        .map(|p| {
            let addr2 = addr2.clone();
            std::thread::spawn(move || {
                request(
                    &addr2,
                    "POST",
                    "/v1/completions",
                    &completion_body(&p, max_tokens, true, 0),
                    LONG,
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    gw2.kill();
    for o in orphans {
        let _ = o.join().unwrap();
    }
    let (_gw3, addr3) = gateway(&redis, &[]);
    wait_workers(&addr3, 1, LONG);
    let p = &prompts[0];
    let r = request(
        &addr3,
        "POST",
        "/v1/completions",
        &completion_body(p, max_tokens, false, 0),
        LONG,
    )
    .unwrap();
    assert_eq!(completion_text(&r, false), expected[p]);
    wait_for(LONG, "no pending entries after the gateway restart", || {
        redis.pending() == 0
    });
    wait_for(LONG, "KV usage back to 0", || {
        let scrape = request(&wm, "GET", "/metrics", "", LONG)
            .map(|r| r.body)
            .unwrap_or_default();
        metric(&scrape, "kestrel:kv_cache_usage_perc") == Some(0.0)
    });
}

/// The gateway's queue depth over all priority bands.
fn queue_depth(addr: &str) -> f64 {
    let scrape = request(addr, "GET", "/metrics", "", LONG).unwrap().body;
    scrape
        .lines()
        .filter(|l| l.starts_with("kestrel:gateway_queue_depth{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn structured_output_runs_through_the_gateway_as_on_serve() {
    let redis = Redis::start();
    let (_w, _m) = worker(&redis, "w-grammar", &[]);
    let (_gw, addr) = gateway(&redis, &[]);
    let (_serve, direct) = serve(&[]);
    wait_workers(&addr, 1, LONG);
    wait_healthy(&direct, LONG);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 16}, "year": {"type": "integer"}},
        "required": ["city", "year"],
        "additionalProperties": false
    });
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "Name a city and the year it was founded."}],
        "max_tokens": 48, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}
    })
    .to_string();
    let content = |host: &str| {
        let r = request(host, "POST", "/v1/chat/completions", &body, LONG).expect("request");
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
            .to_string()
    };
    let via_gateway = content(&addr);
    let value: serde_json::Value =
        serde_json::from_str(&via_gateway).unwrap_or_else(|e| panic!("{via_gateway:?}: {e}"));
    assert!(
        value["city"].is_string() && value["year"].is_i64(),
        "{value}"
    );
    assert_eq!(value.as_object().map(|o| o.len()), Some(2), "{value}");
    assert_eq!(via_gateway, content(&direct), "the gateway and serve agree");

    let bad = serde_json::json!({
        "messages": [{"role": "user", "content": "hi"}],
        "guided_regex": "(unclosed"
    })
    .to_string();
    let r = request(&addr, "POST", "/v1/chat/completions", &bad, LONG).expect("request");
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "guided_regex", "{}", r.body);
}

#[test]
fn the_gateway_serves_the_playground_and_what_its_panel_reads() {
    let redis = Redis::start();
    let (_gw, addr) = gateway(&redis, &[]);
    // Before any worker announced a model: the page loads, the API says 503.
    let page = request(&addr, "GET", "/", "", LONG).unwrap();
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        page.header("content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(page.body.contains("data-testid=\"prompt-input\""));
    let script = request(&addr, "GET", "/playground/app.js", "", LONG).unwrap();
    assert_eq!(script.status, 200);
    assert_eq!(
        script.header("content-type").as_deref(),
        Some("text/javascript; charset=utf-8")
    );
    let generate = r#"{"inputs": "Hi", "parameters": {"max_new_tokens": 2}}"#;
    assert_eq!(
        request(&addr, "POST", "/", generate, LONG).unwrap().status,
        503
    );
    // With a worker: the same page, POST / is TGI through the fleet.
    let (_w, _) = worker(&redis, "w-playground", &[]);
    wait_workers(&addr, 1, LONG);
    let page = request(&addr, "GET", "/", "", LONG).unwrap();
    assert_eq!(page.status, 200);
    assert!(page.header("content-security-policy").is_some());
    let r = request(&addr, "POST", "/", generate, LONG).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["generated_text"].is_string(), "{}", r.body);
    // The gateway exports no engine gauges (its workers do), so the page's panel reads
    // running, waiting and KV usage from /health, and hides the output rate.
    let scrape = request(&addr, "GET", "/metrics", "", LONG).unwrap().body;
    assert_eq!(metric(&scrape, "kestrel:num_requests_running"), None);
    assert_eq!(metric(&scrape, "kestrel:generation_tokens_total"), None);
    let health = request(&addr, "GET", "/health", "", LONG).unwrap().json();
    for field in ["running", "waiting", "kv_cache_usage"] {
        assert!(health[field].is_number(), "{health}");
    }
    // A wrong method on a known route: an OpenAI-shaped 405 with `Allow`, as on `kestrel serve`.
    let r = request(&addr, "DELETE", "/generate", "", LONG).unwrap();
    assert_eq!(r.status, 405, "{}", r.body);
    assert_eq!(r.header("allow").as_deref(), Some("POST"));
    let error = &r.json()["error"];
    assert_eq!(error["type"], "invalid_request_error", "{}", r.body);
    assert_eq!(
        error["request_id"].as_str(),
        r.header("x-request-id").as_deref(),
        "{}",
        r.body
    );
}
