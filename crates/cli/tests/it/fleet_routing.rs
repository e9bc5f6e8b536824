//! Cache-aware routing end to end: a real Redis, a real gateway and two real workers. A
//! conversation's next turn goes back to the worker whose prefix cache holds its history; a
//! killed worker is forgotten by the gateway's index and its conversation carries on elsewhere
//! (a turn routed to it just before it died included); work routed to a stuck or dead worker
//! is taken by another; `--routing shared` still serves; a burst of long prompts is not all
//! taken by the first worker that reads the shared stream; a worker restarted on its KV disk
//! tier announces what the tier kept and gets its conversations back.

use crate::fleet_common;

use std::time::Duration;

use fleet_common::*;
use kestrel_engine::api::{EngineRequest, RequestLimits};
use kestrel_engine::sampling::SamplingParams;
use kestrel_fleet::identity::ModelIdentity;
use kestrel_fleet::protocol::{Job, WorkerStatus};

const LONG: Duration = Duration::from_secs(180);

/// The sample of `name` whose labels contain `label` (e.g. `decision="cache_hit"`).
fn labelled(scrape: &str, name: &str, label: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

fn scrape(addr: &str) -> String {
    request(addr, "GET", "/metrics", "", LONG)
        .map(|r| r.body)
        .unwrap_or_default()
}

fn prompt_tokens(worker_metrics: &str) -> f64 {
    metric(&scrape(worker_metrics), "kestrel:prompt_tokens_total").unwrap_or(0.0)
}

/// A first turn of about 150 tokens, its own for each `topic`.
fn first_turn(topic: &str) -> String {
    let mut s = format!("We are talking about {topic}. ");
    for i in 0..12 {
        s.push_str(&format!(
            "Note {i} on {topic}: it matters, and here is why. "
        ));
    }
    s.push_str("Summarize:");
    s
}

/// Completes `prompt` (greedy, 8 tokens); returns the text and the cached prompt tokens.
fn complete(gateway: &str, prompt: &str) -> (String, u64) {
    let body = completion_body(prompt, 8, false, 0);
    let r = request(gateway, "POST", "/v1/completions", &body, LONG).unwrap();
    let text = completion_text(&r, false);
    let cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    (text, cached)
}

/// Which of `workers` (metrics addresses) computed prompt tokens during `f`.
fn served_by<T>(workers: &[&str], f: impl FnOnce() -> T) -> (T, Vec<usize>) {
    let before: Vec<f64> = workers.iter().map(|w| prompt_tokens(w)).collect();
    let out = f();
    // Prompt tokens are counted when the request is admitted; the response came after.
    let after: Vec<f64> = workers.iter().map(|w| prompt_tokens(w)).collect();
    let who = (0..workers.len())
        .filter(|&i| after[i] > before[i])
        .collect();
    (out, who)
}

/// Waits until the gateway's index holds at least `blocks` blocks.
fn wait_indexed(gateway: &str, blocks: f64) {
    wait_for(LONG, "the gateway's index to learn the blocks", || {
        metric(&scrape(gateway), "kestrel:gateway_prefix_index_blocks").unwrap_or(0.0) >= blocks
    });
}

#[test]
fn a_conversations_next_turn_goes_back_to_the_worker_that_holds_it() {
    let redis = Redis::start();
    let (_a, ma) = worker(&redis, "w-route-a", &[]);
    let (_b, mb) = worker(&redis, "w-route-b", &[]);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 2, LONG);
    let workers = [ma.as_str(), mb.as_str()];
    let topics = ["rivers", "lighthouses", "orchards", "glaciers"];
    let mut firsts = Vec::new();
    for topic in topics {
        let prompt = first_turn(topic);
        let ((text, _), who) = served_by(&workers, || complete(&addr, &prompt));
        assert_eq!(who.len(), 1, "one worker ran the first turn of {topic}");
        firsts.push((format!("{prompt}{text}"), who[0]));
    }
    // Every first turn's blocks (at least eight 16-token blocks each) reach the index.
    wait_indexed(&addr, 8.0 * topics.len() as f64);
    for (history, first_worker) in &firsts {
        let next = format!("{history} Now say more:");
        let ((_, cached), who) = served_by(&workers, || complete(&addr, &next));
        assert_eq!(
            who,
            vec![*first_worker],
            "the next turn went to another worker"
        );
        assert!(
            cached >= 128,
            "the next turn reused only {cached} cached tokens"
        );
    }
    let gw = scrape(&addr);
    let hits = labelled(&gw, "kestrel:gateway_routed_requests_total", "cache_hit");
    assert!(hits >= topics.len() as f64, "{gw}");
    assert!(
        metric(&gw, "kestrel:gateway_matched_prefix_tokens_total").unwrap_or(0.0) >= 512.0,
        "{gw}"
    );
    wait_for(LONG, "no pending entries", || redis.pending() == 0);
}

#[test]
fn a_killed_workers_conversation_carries_on_and_the_index_forgets_it() {
    let redis = Redis::start();
    let (a, ma) = worker(&redis, "w-kill-a", &[]);
    let (b, mb) = worker(&redis, "w-kill-b", &[]);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 2, LONG);
    let workers = [ma.as_str(), mb.as_str()];
    // New conversations until each worker holds one (the index then knows both).
    let mut held: Vec<Option<String>> = vec![None, None];
    for topic in [
        "harbours",
        "canyons",
        "meadows",
        "volcanoes",
        "reefs",
        "tundra",
    ] {
        let prompt = first_turn(topic);
        let ((text, _), who) = served_by(&workers, || complete(&addr, &prompt));
        assert_eq!(who.len(), 1);
        held[who[0]].get_or_insert(format!("{prompt}{text}"));
        if held.iter().all(Option::is_some) {
            break;
        }
    }
    assert!(
        held.iter().all(Option::is_some),
        "one worker took every conversation"
    );
    wait_for(LONG, "both workers in the index", || {
        metric(&scrape(&addr), "kestrel:gateway_prefix_index_workers") == Some(2.0)
    });
    let (mut doomed, survivor, history) = (a, mb, held[0].take().unwrap());
    let _other = b;
    doomed.kill();
    // Sent at once, while the gateway still sees the dead worker's heartbeat: routed to it,
    // then taken by the survivor once the heartbeat expires. Nothing is lost.
    let history = format!("{history} And then:");
    let before = prompt_tokens(&survivor);
    let next = {
        let (addr, history) = (addr.clone(), history.clone());
        std::thread::spawn(move || complete(&addr, &history))
    };
    wait_for(LONG, "the index to forget the dead worker", || {
        metric(&scrape(&addr), "kestrel:gateway_prefix_index_workers") == Some(1.0)
    });
    let (second, _) = next.join().unwrap();
    assert!(!second.is_empty());
    assert!(
        prompt_tokens(&survivor) > before,
        "the survivor ran the next turn"
    );
    assert_eq!(
        metric(&scrape(&addr), "kestrel:gateway_live_workers"),
        Some(1.0)
    );
    // The turn after goes to the survivor, which now holds the conversation.
    let third = format!("{history}{second} Finally:");
    wait_for(LONG, "the survivor's new blocks in the index", || {
        let hashes_known = metric(&scrape(&addr), "kestrel:gateway_prefix_index_blocks");
        hashes_known.unwrap_or(0.0) >= 16.0
    });
    let hits_before = labelled(
        &scrape(&addr),
        "kestrel:gateway_routed_requests_total",
        "cache_hit",
    );
    let (_, cached) = complete(&addr, &third);
    assert!(cached >= 128, "the survivor reused only {cached} tokens");
    let hits = labelled(
        &scrape(&addr),
        "kestrel:gateway_routed_requests_total",
        "cache_hit",
    );
    assert_eq!(hits, hits_before + 1.0);
    wait_for(LONG, "no pending entries", || redis.pending() == 0);
}

#[test]
fn shared_routing_queues_everything_on_the_shared_streams() {
    let redis = Redis::start();
    let (_a, _) = worker(&redis, "w-shared-a", &[]);
    let (_b, _) = worker(&redis, "w-shared-b", &[]);
    let (_gw, addr) = gateway(&redis, &["--routing", "shared"]);
    wait_workers(&addr, 2, LONG);
    let prompt = first_turn("deserts");
    let (text, _) = complete(&addr, &prompt);
    for _ in 0..3 {
        complete(&addr, &format!("{prompt}{text} More:"));
    }
    let gw = scrape(&addr);
    assert_eq!(
        labelled(&gw, "kestrel:gateway_routed_requests_total", "\"shared\""),
        4.0,
        "{gw}"
    );
    assert_eq!(
        labelled(&gw, "kestrel:gateway_routed_requests_total", "cache_hit"),
        0.0
    );
    assert_eq!(
        metric(&gw, "kestrel:gateway_prefix_index_blocks"),
        Some(0.0)
    );
    let routed = redis.cli(&["--scan", "--pattern", "kestrel:requests:*:worker:*"]);
    assert!(
        redis
            .request_streams()
            .iter()
            .filter(|s| s.contains(":worker:"))
            .all(|s| redis.cli(&["XLEN", s]).trim() == "0"),
        "{routed}"
    );
    let bad = request(&addr, "GET", "/health", "", LONG).unwrap();
    assert_eq!(bad.status, 200);
}

#[test]
fn a_burst_of_long_prompts_is_left_for_a_worker_that_arrives_later() {
    let redis = Redis::start();
    // One step of 32 tokens: a worker takes a shared entry only while its unprefilled
    // prompts fit in that.
    let budget = ["--max-num-batched-tokens", "32"];
    let (_a, ma) = worker(&redis, "w-burst-a", &budget);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 1, LONG);
    // 16 distinct ~400-token prompts at once: several seconds of prefill for one thread.
    let burst: Vec<_> = (0..16)
        .map(|i| {
            let prompt = format!("{} {}", first_turn(&format!("topic {i}")), first_turn("x"));
            let prompt = format!("{prompt} {prompt}");
            let addr = addr.clone();
            std::thread::spawn(move || complete(&addr, &prompt))
        })
        .collect();
    let (_b, mb) = worker(&redis, "w-burst-b", &budget);
    for t in burst {
        assert!(!t.join().unwrap().0.is_empty());
    }
    // Taking every entry it could hold (64 sequence slots), worker a would have left b none.
    let (a, b) = (prompt_tokens(&ma), prompt_tokens(&mb));
    assert!(a > 0.0 && b > 0.0, "prompt tokens: a {a}, b {b}");
    wait_for(LONG, "no pending entries", || redis.pending() == 0);
}

/// Queues a small job of `model` on the normal band of the stream routed to `worker`.
fn inject_routed(redis: &Redis, model: &ModelIdentity, worker: &str, id: &str) {
    let limits = RequestLimits {
        vocab_size: 40,
        max_model_len: 64,
    };
    let sampling = SamplingParams {
        max_tokens: 4,
        ..Default::default()
    };
    let req = EngineRequest::new(vec![1, 2, 3], sampling, &limits).unwrap();
    let job = Job::new(id.into(), model, &req, 7);
    let stream = format!("kestrel:requests:{}:worker:{worker}:normal", model.key());
    let json = serde_json::to_string(&job).unwrap();
    redis.cli(&[
        "XGROUP",
        "CREATE",
        &stream,
        "kestrel-workers",
        "0",
        "MKSTREAM",
    ]);
    redis.cli(&["SADD", &format!("kestrel:routed:{}", model.key()), worker]);
    let added = redis.cli(&["XADD", &stream, "*", "v", &json]);
    assert!(added.contains('-'), "XADD failed: {added}");
}

/// Waits until `request` finished, and returns its result stream.
fn finished(redis: &Redis, request: &str) -> String {
    let key = format!("kestrel:results:{request}");
    wait_for(LONG, "the routed job to finish", || {
        redis.cli(&["XRANGE", &key, "-", "+"]).contains("Finished")
    });
    redis.cli(&["XRANGE", &key, "-", "+"])
}

#[test]
fn work_routed_to_a_stuck_or_dead_worker_is_taken_by_another() {
    let redis = Redis::start();
    let (_w, _) = worker(&redis, "w-orphan-taker", &[]);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 1, LONG);
    let name = redis.cli(&["HKEYS", "kestrel:models"]).trim().to_string();
    let model = ModelIdentity {
        fingerprint: redis.cli(&["HGET", "kestrel:models", &name]).trim().into(),
        name,
    };
    // A worker with a heartbeat that never reads its stream (stuck, or full for good).
    let ghost = WorkerStatus {
        worker_id: "w-ghost".into(),
        model: model.clone(),
        max_num_seqs: 4,
        active: 0,
        running: 0,
        waiting: 0,
        kv_usage: 0.0,
        prefix_block_size: Some(16),
        adapters: Vec::new(),
        state: None,
    };
    let beat = serde_json::to_string(&ghost).unwrap();
    redis.cli(&["SET", "kestrel:worker:w-ghost", &beat, "EX", "120"]);
    let start = std::time::Instant::now();
    inject_routed(&redis, &model, "w-ghost", "to-stuck");
    let result = finished(&redis, "to-stuck");
    assert!(result.contains("w-orphan-taker"), "{result}");
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "taken before it waited --claim-idle at a live worker"
    );
    // A worker without a heartbeat: its entries are taken at once, then its streams go.
    inject_routed(&redis, &model, "w-gone", "to-dead");
    let result = finished(&redis, "to-dead");
    assert!(result.contains("w-orphan-taker"), "{result}");
    wait_for(LONG, "the dead worker's streams removed", || {
        let routed = redis.cli(&["SMEMBERS", &format!("kestrel:routed:{}", model.key())]);
        !routed.contains("w-gone")
            && redis
                .request_streams()
                .iter()
                .all(|s| !s.contains(":worker:w-gone:"))
    });
    wait_for(LONG, "no pending entries", || redis.pending() == 0);
}

/// Block files under a disk tier's root (one directory per model fingerprint).
fn tier_files(root: &std::path::Path) -> usize {
    let Ok(dirs) = std::fs::read_dir(root) else {
        return 0;
    };
    dirs.flatten()
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .flatten()
        .flatten()
        .filter(|f| f.path().extension().is_some_and(|e| e == "kvb"))
        .count()
}

#[test]
fn a_restarted_worker_gets_back_the_conversations_its_disk_tier_kept() {
    let live = |addr: &str| labelled(&scrape(addr), "kestrel:gateway_live_workers", "model_name");
    let redis = Redis::start();
    let root = |w: &str| {
        let dir =
            std::env::temp_dir().join(format!("kestrel-fleet-tier-{w}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    };
    let (disk_a, disk_b) = (root("a"), root("b"));
    let args = |d: &std::path::Path| ["--kv-cache-disk".to_string(), d.display().to_string()];
    let (args_a, args_b) = (args(&disk_a), args(&disk_b));
    let args_a: Vec<&str> = args_a.iter().map(String::as_str).collect();
    let args_b: Vec<&str> = args_b.iter().map(String::as_str).collect();
    // Worker a alone takes a conversation's first turn; then b joins, empty.
    let (mut a, _) = worker(&redis, "w-tier-a", &args_a);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 1, LONG);
    let prompt = first_turn("ferries");
    let (text, _) = complete(&addr, &prompt);
    let history = format!("{prompt}{text}");
    let (_b, mb) = worker(&redis, "w-tier-b", &args_b);
    wait_workers(&addr, 2, LONG);
    wait_indexed(&addr, 8.0);
    wait_for(LONG, "worker a's blocks on its disk", || {
        tier_files(&disk_a) >= 8
    });
    let blocks = |addr: &str| metric(&scrape(addr), "kestrel:gateway_prefix_index_blocks");
    a.kill();
    wait_for(LONG, "the gateway to forget the dead worker", || {
        blocks(&addr) == Some(0.0) && live(&addr) == 1.0
    });
    // The same worker comes back with an empty RAM cache and its disk tier: its first
    // snapshot announces what the tier kept, so the conversation goes back to it.
    let (_a, ma) = worker(&redis, "w-tier-a", &args_a);
    wait_workers(&addr, 2, LONG);
    wait_indexed(&addr, 8.0);
    let hits_before = labelled(
        &scrape(&addr),
        "kestrel:gateway_routed_requests_total",
        "cache_hit",
    );
    let next = format!("{history} Now say more:");
    let ((_, cached), who) = served_by(&[ma.as_str(), mb.as_str()], || complete(&addr, &next));
    assert_eq!(who, vec![0], "the next turn went to the worker without it");
    assert!(
        cached >= 128,
        "the disk tier gave back only {cached} tokens"
    );
    let hits = labelled(
        &scrape(&addr),
        "kestrel:gateway_routed_requests_total",
        "cache_hit",
    );
    assert_eq!(hits, hits_before + 1.0, "routed as a cache hit");
    wait_for(LONG, "no pending entries", || redis.pending() == 0);
    let _ = (
        std::fs::remove_dir_all(&disk_a),
        std::fs::remove_dir_all(&disk_b),
    );
}
