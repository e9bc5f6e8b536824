//! A worker whose heap stays fragmented drains and exits with the restart status; the
//! replacement a supervisor would start takes over, and every request completes with the text
//! a single `kestrel serve` gives.

use crate::fleet_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet_common::*;

const LONG: Duration = Duration::from_secs(180);
const MAX_TOKENS: usize = 24;

/// Sends every prompt from its own thread; returns the (prompt, response text) pairs.
fn send_all(addr: &str, prompts: &[String]) -> Vec<std::thread::JoinHandle<(String, String)>> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| {
            let (addr, prompt) = (addr.to_string(), prompt.clone());
            let stream = i % 2 == 0;
            std::thread::spawn(move || {
                let body = completion_body(&prompt, MAX_TOKENS, stream, 0);
                let r = request(&addr, "POST", "/v1/completions", &body, LONG).unwrap();
                assert_eq!(r.status, 200, "{prompt:?}: {}", r.body);
                (prompt, completion_text(&r, stream))
            })
        })
        .collect()
}

#[test]
fn a_fragmented_worker_drains_exits_and_its_replacement_takes_over() {
    let prompts = prompts();
    let expected = Arc::new(reference_texts(&prompts, MAX_TOKENS));
    let redis = Redis::start();
    let (mut fragmented, fragmented_metrics) = worker(
        &redis,
        "w-fragmented",
        &[
            "--max-num-seqs",
            "4",
            "--fault-fragment-heap",
            "1024",
            "--restart-on-fragmentation",
            "0.3",
            "--fragmentation-window",
            "6",
        ],
    );
    let (_steady, _) = worker(&redis, "w-steady", &["--max-num-seqs", "4"]);
    let (_gw, addr) = gateway(&redis, &[]);
    wait_workers(&addr, 2, LONG);
    let scrape = request(&fragmented_metrics, "GET", "/metrics", "", LONG)
        .unwrap()
        .body;
    let fraction = metric(&scrape, "kestrel:heap_fragmentation_perc").expect("the gauge");
    assert!(fraction > 0.3, "the fault left the heap at {fraction}");

    let clients = send_all(&addr, &prompts);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = fragmented.child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < LONG, "the fragmented worker never exited");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(75), "exit status of a restart");
    let log = std::fs::read_to_string(log_path("w-fragmented")).unwrap();
    assert!(log.contains("restarting: heap fragmentation"), "{log}");

    // The supervisor's replacement joins; the work goes on across both.
    let (_replacement, _) = worker(&redis, "w-replacement", &["--max-num-seqs", "4"]);
    wait_workers(&addr, 2, LONG);
    let later = send_all(&addr, &prompts[..8]);
    for c in clients.into_iter().chain(later) {
        let (prompt, text) = c.join().unwrap();
        assert_eq!(text, expected[&prompt], "prompt {prompt:?}");
    }
    wait_for(LONG, "no pending entries", || redis.pending() == 0);
}
