//! End-to-end through [`EngineHandle`]: concurrent requests produce exactly the mock model's
//! reference outputs, with and without KV pressure, with usage and timings filled in.

use crate::engine_common;

use std::time::Duration;

use engine_common::*;
use kestrel_engine::api::EngineEvent;
use kestrel_engine::mock_executor::reference_generate;
use kestrel_engine::request::FinishReason;

/// Submits 16 requests of lengths 3..=48 (some sharing prefixes), reads them on 16 threads and
/// checks every output against [`reference_generate`].
fn run_sixteen(num_kv_blocks: usize) -> kestrel_engine::api::EngineStats {
    let (engine, _ctl) = start(config(num_kv_blocks));
    let mut expected = Vec::new();
    let mut readers = Vec::new();
    for i in 0..16u32 {
        let mut p = prompt(i % 5, 3 + (i as usize * 3) % 46);
        p.push(1 + i); // distinct tail, shared prefix with requests of the same `i % 5`
        let max_tokens = 8 + (i as usize % 4) * 6;
        expected.push(reference_generate(&p, max_tokens, &[EOS], VOCAB));
        let stream = engine
            .submit(request(p, max_tokens).build())
            .expect("admitted");
        readers.push(std::thread::spawn(move || collect(stream)));
    }
    for (i, (reader, want)) in readers.into_iter().zip(expected).enumerate() {
        let got = reader.join().expect("reader thread");
        assert_eq!(got.ids, want, "request {i}: tokens");
        assert_eq!(got.text, text_of(&want), "request {i}: text");
        let reason = if want.last() == Some(&EOS) {
            FinishReason::Stop
        } else {
            FinishReason::Length
        };
        assert_eq!(got.reason(), reason, "request {i}: finish reason");
        assert_eq!(
            got.usage().completion_tokens,
            want.len(),
            "request {i}: usage"
        );
        assert!(
            got.logprobs.iter().all(Option::is_none),
            "no logprobs were asked for"
        );
    }
    assert!(wait_until(Duration::from_secs(2), || engine
        .stats()
        .running
        == 0));
    let stats = engine.stats();
    engine.shutdown(Duration::from_secs(1));
    stats
}

#[test]
fn sixteen_concurrent_requests_match_reference() {
    let stats = run_sixteen(512);
    assert_eq!(stats.kv_usage, 0.0);
    assert_eq!(stats.waiting, 0);
    assert!(
        stats.prompt_tokens_total > 16 * 3,
        "prompt tokens counted: {stats:?}"
    );
    assert!(
        stats.generation_tokens_total >= 16,
        "generated tokens counted: {stats:?}"
    );
    assert!(
        stats.prefix_cache_hits_total > 0,
        "shared prefixes hit the cache: {stats:?}"
    );
}

#[test]
fn outputs_survive_preemption_under_kv_pressure() {
    // 24 blocks of 4 tokens hold far less than 16 requests of up to 49 + 26 tokens.
    let stats = run_sixteen(24);
    assert!(
        stats.preemptions_total > 0,
        "the pool was small enough to preempt: {stats:?}"
    );
    assert_eq!(stats.kv_usage, 0.0);
}

#[test]
fn usage_and_timings_are_filled() {
    let (engine, _ctl) = start(config(64));
    let p = prompt(3, 10);
    let first = collect(
        engine
            .submit(request(p.clone(), 5).build())
            .expect("admitted"),
    );
    let usage = first.usage();
    assert_eq!(usage.prompt_tokens, 10);
    assert_eq!(usage.cached_tokens, 0);
    let engine_common::End::Finished { timings, .. } = first.end else {
        unreachable!()
    };
    assert!(timings.queue <= timings.time_to_first_token);
    assert!(timings.time_to_first_token <= timings.end_to_end);
    assert!(timings.end_to_end > Duration::ZERO);
    // The same prompt again: its first two full blocks (8 tokens) come from the prefix cache.
    let again = collect(engine.submit(request(p, 5).build()).expect("admitted"));
    assert_eq!(again.usage().cached_tokens, 8);
    assert_eq!(again.ids, first.ids);
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn logprobs_are_reported_when_asked() {
    let (engine, _ctl) = start(config(64));
    let mut req = request(prompt(1, 6), 4);
    req.sampling.logprobs = Some(3);
    let got = collect(engine.submit(req.build()).expect("admitted"));
    assert_eq!(got.logprobs.len(), got.ids.len());
    for (id, lp) in got.ids.iter().zip(&got.logprobs) {
        let lp = lp.as_ref().expect("logprobs present");
        assert_eq!(lp.chosen.token, *id);
        assert_eq!(lp.top.len(), 3);
        assert_eq!(
            lp.top[0].token, *id,
            "the mock's one-hot row makes the chosen token the best"
        );
        assert!(lp.chosen.logprob > lp.top[1].logprob);
    }
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn async_next_yields_the_same_events() {
    let (engine, _ctl) = start(config(64));
    let p = prompt(7, 12);
    let want = reference_generate(&p, 6, &[EOS], VOCAB);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let got = rt.block_on(async {
        let mut stream = engine.submit(request(p, 6).build()).expect("admitted");
        let mut ids = Vec::new();
        let mut finished = false;
        while let Some(ev) = stream.next().await {
            match ev {
                EngineEvent::Token(t) => ids.push(t.id),
                EngineEvent::Finished { .. } => finished = true,
                EngineEvent::Failed(f) => panic!("failed: {f}"),
            }
        }
        assert!(finished);
        assert!(stream.next().await.is_none());
        ids
    });
    assert_eq!(got, want);
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn model_error_fails_the_batch_and_the_engine_keeps_serving() {
    let (engine, ctl) = start(config(64));
    ctl.pause();
    let a = engine
        .submit(request(prompt(1, 5), 10).build())
        .expect("admitted");
    ctl.wait_blocked(); // step 0 holds `a` alone; `b` joins it in step 1, which fails
    let b = engine
        .submit(request(prompt(2, 7), 10).build())
        .expect("admitted");
    ctl.fail_at_step(1);
    ctl.resume();
    let (a, b) = (collect(a), collect(b));
    assert_eq!(a.ids.len(), 1, "a sampled one token in step 0: {a:?}");
    assert!(b.ids.is_empty(), "{b:?}");
    assert!(
        matches!(a.failure(), kestrel_engine::api::EngineFailure::Model(_)),
        "{a:?}"
    );
    assert!(
        matches!(b.failure(), kestrel_engine::api::EngineFailure::Model(_)),
        "{b:?}"
    );
    assert!(wait_until(Duration::from_secs(2), || engine
        .stats()
        .kv_usage
        == 0.0));
    let p = prompt(3, 9);
    let c = collect(
        engine
            .submit(request(p.clone(), 6).build())
            .expect("admitted"),
    );
    assert_eq!(c.ids, reference_generate(&p, 6, &[EOS], VOCAB));
    engine.shutdown(Duration::from_secs(1));
}
