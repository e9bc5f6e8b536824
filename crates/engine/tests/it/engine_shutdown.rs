//! Graceful shutdown: in-flight work finishes before the deadline, the rest fails with
//! `ShuttingDown`, and later submits are refused.

use crate::engine_common;

use std::time::{Duration, Instant};

use engine_common::*;
use kestrel_engine::api::{EngineFailure, SubmitError};
use kestrel_engine::mock_executor::reference_generate;

#[test]
fn shutdown_finishes_in_flight_requests_then_refuses_new_ones() {
    let (engine, ctl) = start(config(64));
    ctl.set_delay(Duration::from_millis(1));
    let streams: Vec<_> = (0..4)
        .map(|i| {
            engine
                .submit(request(prompt(i, 6 + i as usize), 20).build())
                .expect("admitted")
        })
        .collect();
    engine.shutdown(Duration::from_secs(20));
    for (i, s) in streams.into_iter().enumerate() {
        let got = collect(s);
        let want = reference_generate(&prompt(i as u32, 6 + i), 20, &[EOS], VOCAB);
        assert_eq!(got.ids, want, "request {i} ran to completion");
        got.reason();
    }
    assert_eq!(
        engine.submit(request(prompt(9, 4), 4).build()).err(),
        Some(SubmitError::Stopped)
    );
    let stats = engine.stats();
    assert_eq!((stats.running, stats.waiting, stats.kv_usage), (0, 0, 0.0));
    engine.shutdown(Duration::from_secs(1)); // a second call returns at once
}

#[test]
fn requests_still_running_at_the_deadline_fail() {
    let (engine, ctl) = start(config(64));
    ctl.set_delay(Duration::from_millis(5));
    let mut long = request(prompt(1, 8), 200);
    long.sampling.ignore_eos = true;
    let mut stream = engine.submit(long.build()).expect("admitted");
    assert!(stream.blocking_next().is_some(), "it started");
    let t = Instant::now();
    engine.shutdown(Duration::from_millis(50));
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "shutdown honoured its deadline: {:?}",
        t.elapsed()
    );
    let rest = collect(stream);
    assert_eq!(rest.failure(), EngineFailure::ShuttingDown);
    assert!(rest.ids.len() < 199);
}

#[test]
fn idle_shutdown_is_prompt() {
    let (engine, _ctl) = start(config(64));
    let t = Instant::now();
    engine.shutdown(Duration::from_secs(30));
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(
        engine.submit(request(prompt(1, 4), 4).build()).err(),
        Some(SubmitError::Stopped)
    );
}
