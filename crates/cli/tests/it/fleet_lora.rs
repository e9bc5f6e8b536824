//! A fleet of two models and a LoRA adapter (real Redis, gateway and workers): one worker of
//! the default model, two of the tiny fixture of which one also serves adapter `all7`.
//! Requests route by model and adapter and give `kestrel serve`'s greedy texts; `/v1/models`
//! lists the adapter under its base model; killing the tiny worker without the adapter loses
//! no request for any model (the adapter's worker serves the base model too); killing the
//! adapter's worker turns requests for the adapter into a clear error, never into the base
//! model's text.

use crate::fleet_common;

use std::path::PathBuf;
use std::time::Duration;

use fleet_common::*;

const LONG: Duration = Duration::from_secs(180);
const PROMPT: &str = "Hello world! How are you";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn body(model: &str) -> String {
    serde_json::json!({"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0})
        .to_string()
}

fn scrape(addr: &str) -> String {
    request(addr, "GET", "/metrics", "", LONG)
        .map(|r| r.body)
        .unwrap_or_default()
}

/// The value of the series `name` whose labels include `label` (`key="value"`).
fn labelled(scrape: &str, name: &str, label: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn text(addr: &str, model: &str) -> String {
    let r = request(addr, "POST", "/v1/completions", &body(model), LONG).expect("request");
    assert_eq!(r.json()["model"], model, "{}", r.body);
    completion_text(&r, false)
}

#[test]
fn requests_route_by_model_and_adapter_and_a_dead_worker_loses_nothing() {
    let tiny = fixtures().join("tiny-llama-f32");
    let adapter = format!("all7={}", path_str(&fixtures().join("lora/all7")));
    let lora = ["--served-model-name", "tiny", "--lora-modules", &adapter];
    let (want_tiny, want_all7) = {
        let (_serve, addr) = serve_on(&tiny, &lora);
        wait_healthy(&addr, LONG);
        (text(&addr, "tiny"), text(&addr, "all7"))
    };
    assert_ne!(want_tiny, want_all7, "the adapter changes the text");
    let want_smol = {
        let (_serve, addr) = serve(&["--served-model-name", "smol"]);
        wait_healthy(&addr, LONG);
        text(&addr, "smol")
    };

    let redis = Redis::start();
    let (_gw, gw) = gateway(&redis, &[]);
    let (_ws, _) = worker_on(
        &redis,
        "w-smol",
        &default_model(),
        &["--served-model-name", "smol"],
        &[],
    );
    let (mut wt, _) = worker_on(
        &redis,
        "w-tiny",
        &tiny,
        &["--served-model-name", "tiny"],
        &[],
    );
    let (mut wl, _) = worker_on(&redis, "w-tiny-lora", &tiny, &lora, &[]);
    wait_for(LONG, "the gateway to see the three workers", || {
        let scrape = scrape(&gw);
        labelled(
            &scrape,
            "kestrel:gateway_live_workers",
            "model_name=\"tiny\"",
        ) == Some(2.0)
            && labelled(
                &scrape,
                "kestrel:gateway_live_workers",
                "model_name=\"smol\"",
            ) == Some(1.0)
    });
    wait_for(LONG, "the adapter in /v1/models", || {
        request(&gw, "GET", "/v1/models", "", LONG)
            .map(|r| r.body.contains("\"all7\"") && r.body.contains("\"smol\""))
            .unwrap_or(false)
    });
    let models = request(&gw, "GET", "/v1/models", "", LONG).unwrap().json();
    let all7 = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "all7")
        .cloned()
        .expect("the adapter is listed");
    assert_eq!(all7["parent"], "tiny", "{all7}");

    // Several rounds, so that adapter requests meet both tiny workers' queues.
    for _ in 0..3 {
        assert_eq!(
            text(&gw, "all7"),
            want_all7,
            "the adapter's text, from its worker"
        );
        assert_eq!(text(&gw, "tiny"), want_tiny);
        assert_eq!(text(&gw, "smol"), want_smol);
    }
    // The prompt is shorter than a KV block, so no cache hit places an adapter request: they
    // went to the adapter's worker as `adapter` (never to the shared stream).
    let routed = labelled(
        &scrape(&gw),
        "kestrel:gateway_routed_requests_total",
        "decision=\"adapter\"",
    );
    assert!(
        routed.unwrap_or(0.0) >= 3.0,
        "adapter requests routed to the adapter's worker: {routed:?}"
    );

    // Requests in flight while the tiny worker without the adapter dies: none is lost.
    let inflight: Vec<_> = (0..6)
        .map(|i| {
            let gw = gw.clone();
            let model = ["tiny", "smol", "all7"][i % 3];
            std::thread::spawn(move || (model, text(&gw, model)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    wt.kill();
    for t in inflight {
        let (model, got) = t.join().expect("a request thread");
        let want = match model {
            "tiny" => &want_tiny,
            "smol" => &want_smol,
            _ => &want_all7,
        };
        assert_eq!(&got, want, "{model} after a worker died");
    }
    assert_eq!(
        text(&gw, "tiny"),
        want_tiny,
        "the adapter's worker serves the base"
    );

    // Without the adapter's worker the adapter is gone: a clear refusal, not the base text.
    wl.kill();
    wait_for(LONG, "the adapter to leave /v1/models", || {
        request(&gw, "GET", "/v1/models", "", LONG)
            .map(|r| !r.body.contains("\"all7\""))
            .unwrap_or(false)
    });
    let r = request(&gw, "POST", "/v1/completions", &body("all7"), LONG).unwrap();
    assert!(matches!(r.status, 404 | 503), "{} {}", r.status, r.body);
    assert!(
        r.json()["error"]["message"].as_str().is_some(),
        "{}",
        r.body
    );
    assert_eq!(text(&gw, "smol"), want_smol, "the other model is untouched");
}

/// Sends SIGSTOP or SIGKILL to `p`.
fn signal(p: &Proc, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &p.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {sig} {}", p.name);
}

/// A request for the adapter whose worker died before taking it goes back to the queue: the
/// worker without the adapter that takes over the dead worker's stream does not run it on the
/// base model nor fail it, and a worker with the adapter that starts later answers it with the
/// adapter's text. Once no worker with the adapter comes within the queue time, it fails with
/// a clear error.
#[test]
fn a_job_for_an_adapter_whose_worker_died_waits_for_another_worker_with_it() {
    let tiny = fixtures().join("tiny-llama-f32");
    let adapter = format!("all7={}", path_str(&fixtures().join("lora/all7")));
    let lora = ["--served-model-name", "tiny", "--lora-modules", &adapter];
    let want_all7 = {
        let (_serve, addr) = serve_on(&tiny, &lora);
        wait_healthy(&addr, LONG);
        text(&addr, "all7")
    };

    let redis = Redis::start();
    let (_gw, gw) = gateway(&redis, &["--max-queue-time", "20"]);
    let (_wt, _) = worker_on(
        &redis,
        "w-plain",
        &tiny,
        &["--served-model-name", "tiny"],
        &[],
    );
    let (mut wl, _) = worker_on(&redis, "w-lora", &tiny, &lora, &[]);
    wait_for(LONG, "the adapter in /v1/models", || {
        request(&gw, "GET", "/v1/models", "", LONG)
            .map(|r| r.body.contains("\"all7\""))
            .unwrap_or(false)
    });
    assert_eq!(text(&gw, "all7"), want_all7);

    // The adapter's worker stalls, takes requests routed to it, then dies without taking them.
    signal(&wl, "-STOP");
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let gw = gw.clone();
            std::thread::spawn(move || text(&gw, "all7"))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    signal(&wl, "-KILL");
    wl.kill();
    // Long enough for the plain worker to take over the dead worker's stream at least once.
    std::thread::sleep(Duration::from_secs(6));
    let (_wl2, _) = worker_on(&redis, "w-lora-2", &tiny, &lora, &[]);
    for t in waiting {
        assert_eq!(
            t.join().expect("a request thread"),
            want_all7,
            "the adapter's text"
        );
    }
    assert_eq!(redis.pending(), 0, "every job acknowledged");
}

/// With no worker serving the adapter any more, a job queued for it fails with a clear error
/// once its queue time has passed (instead of waiting forever or running on the base model).
#[test]
fn a_job_for_an_adapter_no_live_worker_serves_fails_after_its_queue_time() {
    let tiny = fixtures().join("tiny-llama-f32");
    let adapter = format!("all7={}", path_str(&fixtures().join("lora/all7")));
    let lora = ["--served-model-name", "tiny", "--lora-modules", &adapter];
    let redis = Redis::start();
    let (_gw, gw) = gateway(&redis, &["--max-queue-time", "8"]);
    let (_wt, _) = worker_on(
        &redis,
        "w-plain",
        &tiny,
        &["--served-model-name", "tiny"],
        &[],
    );
    let (mut wl, _) = worker_on(&redis, "w-lora", &tiny, &lora, &[]);
    wait_for(LONG, "the adapter in /v1/models", || {
        request(&gw, "GET", "/v1/models", "", LONG)
            .map(|r| r.body.contains("\"all7\""))
            .unwrap_or(false)
    });
    signal(&wl, "-STOP");
    let started = std::time::Instant::now();
    let waiting = {
        let gw = gw.clone();
        std::thread::spawn(move || request(&gw, "POST", "/v1/completions", &body("all7"), LONG))
    };
    std::thread::sleep(Duration::from_millis(500));
    signal(&wl, "-KILL");
    wl.kill();
    let r = waiting
        .join()
        .expect("the request thread")
        .expect("an answer");
    let waited = started.elapsed();
    assert!(r.status >= 500, "{} {}", r.status, r.body);
    let message = r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("LoRA adapter `all7`"), "{message}");
    assert!(
        waited >= Duration::from_secs(7),
        "failed only after the queue time: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(60),
        "and not much later: {waited:?}"
    );
    assert_eq!(redis.pending(), 0, "the job was acknowledged");
}
