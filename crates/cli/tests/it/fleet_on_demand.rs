//! A worker of several models under `--max-loaded-models 1` (real Redis, gateway and worker
//! processes): it announces both models (one loaded, one not), loads a model on its first job
//! and unloads the other, idle one to make room; alternating requests all get `kestrel
//! serve`'s greedy texts, and the swaps show in the worker's metrics. A job for the unloaded
//! model while the loaded one is busy waits in the queue (the worker does not take it without
//! room) and is answered once the busy model is idle. The gateway's `/v1/models` follows each
//! model's state as the heartbeats announce it.

use crate::fleet_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet_common::*;

const LONG: Duration = Duration::from_secs(180);
const PROMPT: &str = "The capital of France is";

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-llama-f32")
}

fn body(model: &str, max_tokens: usize) -> String {
    serde_json::json!({"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                       "temperature": 0})
    .to_string()
}

fn text(addr: &str, model: &str, max_tokens: usize) -> String {
    let r = request(
        addr,
        "POST",
        "/v1/completions",
        &body(model, max_tokens),
        LONG,
    )
    .expect("request");
    assert_eq!(r.json()["model"], model, "{}", r.body);
    completion_text(&r, false)
}

/// `kestrel serve`'s greedy texts of the model at `path` served as `name`, short and long.
fn reference(path: &Path, name: &str) -> (String, String) {
    let (_serve, addr) = serve_on(path, &["--served-model-name", name]);
    wait_healthy(&addr, LONG);
    (text(&addr, name, 8), text(&addr, name, 48))
}

/// The value of the series `name` whose labels include `label`.
fn labelled(scrape: &str, name: &str, label: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The `state` each of the worker's models announces in its heartbeat, by worker id.
fn states(redis: &Redis) -> Vec<(String, String)> {
    ["wd-a", "wd-b"]
        .iter()
        .map(|id| {
            let json = redis.cli(&["GET", &format!("kestrel:worker:{id}")]);
            let status: serde_json::Value = serde_json::from_str(json.trim()).unwrap_or_default();
            (
                id.to_string(),
                status["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The `status` the gateway's `/v1/models` shows for models `a` and `b`.
fn listed(gw: &str) -> Vec<(String, String)> {
    let models = request(gw, "GET", "/v1/models", "", LONG).unwrap().json();
    ["a", "b"]
        .iter()
        .map(|name| {
            let card = models["data"]
                .as_array()
                .and_then(|cards| cards.iter().find(|c| c["id"] == *name).cloned())
                .unwrap_or_default();
            (
                name.to_string(),
                card["status"]["value"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn pairs(a: &str, b: &str) -> Vec<(String, String)> {
    vec![("a".into(), a.into()), ("b".into(), b.into())]
}

#[test]
fn a_worker_of_two_models_with_room_for_one_loads_each_on_demand() {
    let (want_a, want_a_long) = reference(&default_model(), "a");
    let (want_b, _) = reference(&tiny(), "b");

    let redis = Redis::start();
    let (_gw, gw) = gateway(&redis, &[]);
    let first = PathBuf::from(format!("a={}", path_str(&default_model())));
    let second = format!("b={}", path_str(&tiny()));
    let extra = ["--model", &second, "--max-loaded-models", "1"];
    let (_w, metrics) = worker_on(&redis, "wd", &first, &extra, &[]);
    wait_for(LONG, "both models in the gateway's /v1/models", || {
        request(&gw, "GET", "/v1/models", "", LONG)
            .map(|r| r.body.contains("\"a\"") && r.body.contains("\"b\""))
            .unwrap_or(false)
    });
    // Each model was loaded once at start to be described; only the last one stays.
    let announced = states(&redis);
    assert_eq!(
        announced,
        vec![
            ("wd-a".into(), "unloaded".into()),
            ("wd-b".into(), "loaded".into())
        ]
    );

    wait_for(LONG, "the gateway to list a unloaded and b loaded", || {
        listed(&gw) == pairs("unloaded", "loaded")
    });

    for _ in 0..3 {
        assert_eq!(text(&gw, "a", 8), want_a, "model a after a swap");
        assert_eq!(text(&gw, "b", 8), want_b, "model b after a swap");
    }
    let scrape = request(&metrics, "GET", "/metrics", "", LONG).unwrap().body;
    let loads_a = labelled(&scrape, "kestrel:model_loads_total", "model_name=\"a\"");
    let loads_b = labelled(&scrape, "kestrel:model_loads_total", "model_name=\"b\"");
    assert!(
        loads_a >= Some(4.0) && loads_b >= Some(4.0),
        "{loads_a:?} {loads_b:?}"
    );
    assert_eq!(metric(&scrape, "kestrel:models_loaded"), Some(1.0));
    assert!(
        labelled(&scrape, "kestrel:num_requests_running", "model_name=\"b\"").is_some(),
        "the loaded engine's series carry its model's name"
    );

    // A long job for `a` holds the one room; a job for `b` queued meanwhile waits in Redis
    // and runs once `a` is idle.
    let long = {
        let gw = gw.clone();
        std::thread::spawn(move || text(&gw, "a", 48))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(text(&gw, "b", 8), want_b, "b after waiting for room");
    assert_eq!(long.join().expect("the long request"), want_a_long);
    assert_eq!(redis.pending(), 0, "every job acknowledged");
    wait_for(
        LONG,
        "the heartbeats to show b loaded and a unloaded",
        || {
            states(&redis)
                == vec![
                    ("wd-a".into(), "unloaded".into()),
                    ("wd-b".into(), "loaded".into()),
                ]
        },
    );
    wait_for(LONG, "the gateway to list b loaded and a unloaded", || {
        listed(&gw) == pairs("unloaded", "loaded")
    });
    assert_eq!(text(&gw, "a", 8), want_a);
    wait_for(LONG, "the gateway to list a loaded and b unloaded", || {
        listed(&gw) == pairs("loaded", "unloaded")
    });
}
