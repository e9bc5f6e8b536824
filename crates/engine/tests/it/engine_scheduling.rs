//! Scheduling through the handle: queue timeouts and priorities.

use crate::engine_common;

use std::time::{Duration, Instant};

use engine_common::*;
use kestrel_engine::api::EngineFailure;
use kestrel_engine::mock_executor::reference_generate;

#[test]
fn requests_waiting_past_their_queue_time_fail() {
    let mut cfg = config(64);
    cfg.max_num_seqs = 1;
    let (engine, ctl) = start(cfg);
    ctl.set_delay(Duration::from_millis(1));
    let mut long = request(prompt(1, 8), 100);
    long.sampling.ignore_eos = true; // runs its full 100 steps (>= 100 ms)
    let long = engine.submit(long.build()).expect("admitted");
    let mut impatient = request(prompt(2, 8), 4);
    impatient.max_queue_time = Some(Duration::from_millis(20));
    let impatient = engine.submit(impatient.build()).expect("admitted");
    let mut patient = request(prompt(3, 8), 4);
    patient.max_queue_time = Some(Duration::from_secs(30));
    let patient = engine.submit(patient.build()).expect("admitted");
    let failed = collect(impatient);
    assert_eq!(
        failed.failure(),
        EngineFailure::QueueTimeout(Duration::from_millis(20))
    );
    assert!(failed.ids.is_empty());
    assert_eq!(
        collect(long).ids,
        reference_generate(&prompt(1, 8), 100, &[], VOCAB)
    );
    let patient = collect(patient);
    assert_eq!(
        patient.ids,
        reference_generate(&prompt(3, 8), 4, &[EOS], VOCAB)
    );
    engine.shutdown(Duration::from_secs(1));
}

/// When the request was first scheduled, measured from the common arrival `t0`.
fn started(c: &Collected) -> Duration {
    match &c.end {
        End::Finished { timings, .. } => timings.queue,
        other => panic!("not finished: {other:?}"),
    }
}

#[test]
fn more_urgent_waiting_requests_run_first() {
    // Lower priority values run first (vLLM's convention).
    let mut cfg = config(64);
    cfg.max_num_seqs = 1;
    let (engine, ctl) = start(cfg);
    let t0 = Instant::now();
    let at = |mut r: Req, priority| {
        r.arrival = t0;
        r.priority = priority;
        r
    };
    ctl.pause();
    let first = engine
        .submit(at(request(prompt(1, 6), 5), 0).build())
        .expect("admitted");
    ctl.wait_blocked(); // `first` runs; the others queue behind it
    let low = engine
        .submit(at(request(prompt(2, 6), 5), 1).build())
        .expect("admitted");
    let normal = engine
        .submit(at(request(prompt(3, 6), 5), 0).build())
        .expect("admitted");
    let high = engine
        .submit(at(request(prompt(4, 6), 5), -7).build())
        .expect("admitted");
    ctl.resume();
    let (first, low, normal, high) = (collect(first), collect(low), collect(normal), collect(high));
    let order = [
        started(&first),
        started(&high),
        started(&normal),
        started(&low),
    ];
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "start order by priority: {order:?}"
    );
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn a_high_priority_request_preempts_a_low_one_for_kv_space() {
    // 16 blocks of 4 tokens: `low` (30 + 30 tokens) and `high` (20 + 8) cannot both fit.
    let (engine, ctl) = start(config(16));
    let t0 = Instant::now();
    ctl.pause();
    let mut low = request(prompt(1, 30), 30);
    low.arrival = t0;
    low.sampling.ignore_eos = true; // grows to 60 tokens (15 blocks)
    let low = engine.submit(low.build()).expect("admitted");
    ctl.wait_blocked();
    let mut high = request(prompt(2, 20), 8);
    high.arrival = t0;
    high.priority = -5;
    let high = engine.submit(high.build()).expect("admitted");
    ctl.resume();
    let (low, high) = (collect(low), collect(high));
    assert_eq!(low.ids, reference_generate(&prompt(1, 30), 30, &[], VOCAB));
    assert_eq!(
        high.ids,
        reference_generate(&prompt(2, 20), 8, &[EOS], VOCAB)
    );
    let end = |c: &Collected| match &c.end {
        End::Finished { timings, .. } => timings.end_to_end,
        other => panic!("{other:?}"),
    };
    assert!(end(&high) < end(&low), "high finished first");
    assert!(
        engine.stats().preemptions_total >= 1,
        "{:?}",
        engine.stats()
    );
    engine.shutdown(Duration::from_secs(1));
}
