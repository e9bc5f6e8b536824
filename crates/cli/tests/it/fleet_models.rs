//! Several models in one fleet (real Redis, real gateway and worker processes): each request
//! is answered by the model it names and no other, a worker announcing a served name over
//! other weights is refused and takes no job, and a queue entry prepared for another model is
//! never run.

use crate::fleet_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet_common::*;
use kestrel_engine::api::{EngineRequest, RequestLimits};
use kestrel_engine::sampling::SamplingParams;
use kestrel_fleet::identity::ModelIdentity;
use kestrel_fleet::protocol::Job;

const LONG: Duration = Duration::from_secs(180);
const MAX_TOKENS: usize = 10;

fn gemma() -> PathBuf {
    PathBuf::from(std::env::var_os("KESTREL_GEMMA3_270M").expect(
        "KESTREL_GEMMA3_270M is not set: run the suite with scripts/test.sh (it fetches Gemma 3 270M)",
    ))
}

const PROMPTS: [&str; 3] = [
    "Water boils when",
    "The capital of France is",
    "A short poem about rain:",
];

fn body(model: Option<&str>, prompt: &str, stream: bool) -> String {
    let mut v = serde_json::json!({
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "stream": stream,
    });
    if let Some(m) = model {
        v["model"] = m.into();
    }
    v.to_string()
}

fn complete(addr: &str, model: Option<&str>, prompt: &str, stream: bool) -> Response {
    request(
        addr,
        "POST",
        "/v1/completions",
        &body(model, prompt, stream),
        LONG,
    )
    .unwrap()
}

/// The greedy texts of [`PROMPTS`] from `kestrel serve` on `model`, served as `name`.
fn reference(model: &Path, name: &str) -> Vec<String> {
    let (_serve, addr) = serve_on(model, &["--served-model-name", name]);
    PROMPTS
        .iter()
        .map(|p| completion_text(&complete(&addr, Some(name), p, false), false))
        .collect()
}

/// The value of `name{...model_name="model"...}` in a scrape.
fn labelled(scrape: &str, name: &str, model: &str) -> Option<f64> {
    let label = format!("model_name=\"{model}\"");
    scrape
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn scrape(addr: &str) -> String {
    request(addr, "GET", "/metrics", "", LONG)
        .map(|r| r.body)
        .unwrap_or_default()
}

/// Waits until the gateway counts `n` live workers of each model in `models`.
fn wait_live(gw: &str, models: &[(&str, f64)]) {
    wait_for(LONG, "the gateway to see the workers of each model", || {
        let s = scrape(gw);
        models
            .iter()
            .all(|(m, n)| labelled(&s, "kestrel:gateway_live_workers", m) == Some(*n))
    });
}

/// The identity the fleet serves `name` as, read from Redis.
fn bound(redis: &Redis, name: &str) -> ModelIdentity {
    ModelIdentity {
        name: name.into(),
        fingerprint: redis.cli(&["HGET", "kestrel:models", name]).trim().into(),
    }
}

/// Queues a hand-written job with `model` on the normal stream of `stream_of`.
fn inject(redis: &Redis, stream_of: &ModelIdentity, id: &str, model: Option<&ModelIdentity>) {
    let limits = RequestLimits {
        vocab_size: 40,
        max_model_len: 64,
    };
    let sampling = SamplingParams {
        max_tokens: 4,
        ..Default::default()
    };
    let req = EngineRequest::new(vec![1, 2, 3], sampling, &limits).unwrap();
    let mut job = Job::new(id.into(), stream_of, &req, 7);
    job.model = model.cloned();
    let stream = format!("kestrel:requests:{}:normal", stream_of.key());
    let json = serde_json::to_string(&job).unwrap();
    let added = redis.cli(&["XADD", &stream, "*", "v", &json]);
    assert!(added.contains('-'), "XADD failed: {added}");
}

#[test]
fn two_models_behind_one_gateway_each_answer_with_their_own_weights() {
    let smol = default_model();
    let refs_a = reference(&smol, "a");
    let refs_b = reference(&gemma(), "b");
    assert_ne!(refs_a, refs_b, "the two models must write different texts");

    let redis = Redis::start();
    let (_gw, gw) = gateway(&redis, &[]);
    let (_wa, wa_metrics) = worker_on(&redis, "wa", &smol, &["--served-model-name", "a"], &[]);
    let (mut wb, _) = worker_on(&redis, "wb", &gemma(), &["--served-model-name", "b"], &[]);
    wait_live(&gw, &[("a", 1.0), ("b", 1.0)]);
    wait_for(LONG, "both models' routes", || {
        request(&gw, "GET", "/v1/models", "", LONG)
            .map(|r| r.body.contains("\"a\"") && r.body.contains("\"b\""))
            .unwrap_or(false)
    });
    let models = request(&gw, "GET", "/v1/models", "", LONG).unwrap().json();
    let mut ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["a", "b"]);

    // Both models at once, each model's prompts one after another: every answer is its own
    // model's `kestrel serve` text. (One at a time per model because a batch of several
    // requests may break a near-tie differently from a request alone: Gemma 3 270M Q4_K_M
    // does so on `kestrel serve` too, with no fleet in between.)
    let handles: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|model| {
            let gw = gw.clone();
            std::thread::spawn(move || {
                let mut texts = Vec::new();
                for (p, prompt) in PROMPTS.iter().enumerate() {
                    let stream = p % 2 == 1;
                    let r = complete(&gw, Some(model), prompt, stream);
                    texts.push(completion_text(&r, stream));
                }
                (model, texts)
            })
        })
        .collect();
    for h in handles {
        let (model, texts) = h.join().unwrap();
        let expected = if model == "a" { &refs_a } else { &refs_b };
        assert_eq!(&texts, expected, "model {model}");
    }

    let unknown = complete(&gw, Some("c"), PROMPTS[0], false);
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.json()["error"]["code"], "model_not_found");
    let unnamed = complete(&gw, None, PROMPTS[0], false);
    assert_eq!(unnamed.status, 400, "{}", unnamed.body);
    assert_eq!(unnamed.json()["error"]["param"], "model");

    // Each identity has its own queues: three shared bands, and three routed to each of its
    // workers (one here).
    let (id_a, id_b) = (bound(&redis, "a"), bound(&redis, "b"));
    assert_eq!(id_a.fingerprint.len(), 64);
    assert_ne!(id_a.fingerprint, id_b.fingerprint);
    let streams = redis.request_streams();
    for id in [&id_a, &id_b] {
        let prefix = format!("kestrel:requests:{}:", id.key());
        let (routed, shared): (Vec<&String>, Vec<&String>) = streams
            .iter()
            .filter(|s| s.starts_with(&prefix))
            .partition(|s| s.contains(":worker:"));
        assert_eq!(shared.len(), 3, "{streams:?}");
        assert_eq!(routed.len(), 3, "{streams:?}");
    }

    // Entries prepared for another model, or for none, are refused unrun.
    inject(&redis, &id_a, "foreign-b", Some(&id_b));
    inject(&redis, &id_a, "foreign-none", None);
    for id in ["foreign-b", "foreign-none"] {
        let key = format!("kestrel:results:{id}");
        wait_for(LONG, "the refusal of a foreign job", || {
            redis.cli(&["XLEN", &key]).trim() == "1"
        });
        let entry = redis.cli(&["XRANGE", &key, "-", "+"]);
        assert!(
            entry.contains("Rejected") && entry.contains("not run"),
            "{entry}"
        );
        assert!(!entry.contains("Engine"), "a foreign job ran: {entry}");
    }
    let worker_scrape = scrape(&wa_metrics);
    assert_eq!(
        metric(&worker_scrape, "kestrel:worker_foreign_jobs_total"),
        Some(2.0)
    );
    wait_for(LONG, "no pending entries", || redis.pending() == 0);

    // A model whose workers are all gone: 503 with Retry-After; the other still answers.
    wb.kill();
    wait_live(&gw, &[("a", 1.0), ("b", 0.0)]);
    let gone = complete(&gw, Some("b"), PROMPTS[0], false);
    assert_eq!(gone.status, 503, "{}", gone.body);
    assert!(gone.header("retry-after").is_some(), "{}", gone.head);
    let a = complete(&gw, Some("a"), PROMPTS[0], false);
    assert_eq!(completion_text(&a, false), refs_a[0]);
    let health = request(&gw, "GET", "/health", "", LONG).unwrap();
    assert_eq!(health.status, 200, "{}", health.body);
    assert!(health.body.contains("model `b`"), "{}", health.body);
}

#[test]
fn a_worker_announcing_a_served_name_over_other_weights_is_refused_until_the_first_is_gone() {
    let smol = default_model();
    let refs_smol = reference(&smol, "a");
    let refs_gemma = reference(&gemma(), "a");

    let redis = Redis::start();
    let (_gw, gw) = gateway(&redis, &[]);
    let (mut w1, _) = worker_on(&redis, "w1", &smol, &["--served-model-name", "a"], &[]);
    wait_live(&gw, &[("a", 1.0)]);
    let (_w2, w2_metrics) = worker_on(&redis, "w2", &gemma(), &["--served-model-name", "a"], &[]);
    wait_for(LONG, "the gateway to refuse w2", || {
        labelled(&scrape(&gw), "kestrel:gateway_refused_workers", "a") == Some(1.0)
    });
    let health = request(&gw, "GET", "/health", "", LONG).unwrap();
    assert!(
        health.body.contains("worker w2") && health.body.contains("refused"),
        "{}",
        health.body
    );
    wait_for(LONG, "w2 to know it is refused", || {
        metric(&scrape(&w2_metrics), "kestrel:worker_model_refused") == Some(1.0)
    });

    for (p, expected) in PROMPTS.iter().zip(&refs_smol) {
        for stream in [false, true] {
            let r = complete(&gw, Some("a"), p, stream);
            assert_eq!(&completion_text(&r, stream), expected, "prompt {p:?}");
        }
    }
    let w2_scrape = scrape(&w2_metrics);
    assert_eq!(
        metric(&w2_scrape, "kestrel:generation_tokens_total").unwrap_or(0.0),
        0.0,
        "the refused worker ran a job"
    );

    // Once no worker of the first identity is alive, the newcomer takes the name over.
    let first = bound(&redis, "a");
    w1.kill();
    wait_for(LONG, "w2 to take the name over", || {
        bound(&redis, "a") != first
            && metric(&scrape(&w2_metrics), "kestrel:worker_model_refused") == Some(0.0)
    });
    wait_live(&gw, &[("a", 1.0)]);
    wait_for(LONG, "the gateway to serve the new identity", || {
        labelled(&scrape(&gw), "kestrel:gateway_refused_workers", "a") == Some(0.0)
    });
    // The gateway's routes follow the new binding within a refresh; until then a request
    // meets the old identity without workers: 503 with Retry-After, never the wrong model.
    let mut answered = None;
    wait_for(LONG, "an answer from the new identity", || {
        let r = complete(&gw, Some("a"), PROMPTS[0], false);
        if r.status == 503 {
            assert!(r.header("retry-after").is_some(), "{}", r.head);
            return false;
        }
        answered = Some(completion_text(&r, false));
        true
    });
    assert_eq!(answered.as_ref(), Some(&refs_gemma[0]));
}

/// One worker process of two models (`--model NAME=PATH` twice, as `kestrel serve` takes
/// them): it announces each as a worker of its own (`ID-NAME`), each model's requests get that
/// model's `kestrel serve` text, and its `/metrics` labels each engine's gauges by model.
#[test]
fn one_worker_process_serves_two_models_each_as_serve_does() {
    let smol = default_model();
    let refs_a = reference(&smol, "a");
    let refs_b = reference(&gemma(), "b");

    let redis = Redis::start();
    let (_gw, gw) = gateway(&redis, &[]);
    let a = PathBuf::from(format!("a={}", path_str(&smol)));
    let b = format!("b={}", path_str(&gemma()));
    let (_w, metrics) = worker_on(&redis, "wab", &a, &["--model", &b], &[]);
    wait_live(&gw, &[("a", 1.0), ("b", 1.0)]);
    wait_for(LONG, "both models' routes", || {
        request(&gw, "GET", "/v1/models", "", LONG)
            .map(|r| r.body.contains("\"a\"") && r.body.contains("\"b\""))
            .unwrap_or(false)
    });
    for (model, refs) in [("a", &refs_a), ("b", &refs_b)] {
        let texts: Vec<String> = PROMPTS
            .iter()
            .map(|p| completion_text(&complete(&gw, Some(model), p, false), false))
            .collect();
        assert_eq!(&texts, refs, "model {model}");
    }
    let workers = redis.cli(&["KEYS", "kestrel:worker:*"]);
    assert!(
        workers.contains("kestrel:worker:wab-a") && workers.contains("kestrel:worker:wab-b"),
        "one heartbeat per model: {workers}"
    );
    let scrape = scrape(&metrics);
    for model in ["a", "b"] {
        assert!(
            labelled(&scrape, "kestrel:num_requests_running", model).is_some(),
            "the running gauge of {model}"
        );
    }
}
