//! Admission through [`EngineHandle::submit`]: aborts by dropping a stream, the concurrency
//! limit, and requests that can never fit.

use crate::engine_common;

use std::time::Duration;

use engine_common::*;
use kestrel_engine::api::{EngineEvent, InvalidRequest, SubmitError};

#[test]
fn dropping_a_stream_frees_its_blocks() {
    let mut cfg = config(64);
    cfg.max_concurrent_requests = Some(1);
    let (engine, ctl) = start(cfg);
    ctl.set_delay(Duration::from_millis(1));
    let mut long = request(prompt(4, 10), 200);
    long.sampling.ignore_eos = true;
    let mut stream = engine.submit(long.build()).expect("admitted");
    for _ in 0..3 {
        assert!(matches!(
            stream.blocking_next(),
            Some(EngineEvent::Token(_))
        ));
    }
    let stats = engine.stats();
    assert_eq!(stats.running, 1);
    assert!(stats.kv_usage > 0.0, "{stats:?}");
    assert_eq!(
        engine.submit(request(prompt(5, 4), 4).build()).err(),
        Some(SubmitError::Overloaded(1))
    );
    let steps_at_drop = ctl.steps();
    drop(stream);
    assert!(
        wait_until(Duration::from_secs(1), || {
            let s = engine.stats();
            s.running == 0 && s.waiting == 0 && s.kv_usage == 0.0
        }),
        "blocks not freed: {:?}",
        engine.stats()
    );
    let extra = ctl.steps() - steps_at_drop;
    assert!(
        extra <= 2,
        "the abort took effect within a few steps ({extra})"
    );
    // The dropped stream released its concurrency slot.
    let next = collect(
        engine
            .submit(request(prompt(5, 4), 4).build())
            .expect("slot released"),
    );
    assert_eq!(next.ids.len(), next.usage().completion_tokens);
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn overloaded_beyond_the_concurrency_limit() {
    let mut cfg = config(64);
    cfg.max_concurrent_requests = Some(2);
    let (engine, ctl) = start(cfg);
    ctl.pause();
    let a = engine
        .submit(request(prompt(1, 5), 3).build())
        .expect("first");
    let b = engine
        .submit(request(prompt(2, 5), 3).build())
        .expect("second");
    assert_eq!(
        engine.submit(request(prompt(3, 5), 3).build()).err(),
        Some(SubmitError::Overloaded(2))
    );
    ctl.resume();
    let a = collect(a);
    a.reason();
    // A finished stream no longer counts, even before it is dropped.
    let c = engine
        .submit(request(prompt(3, 5), 3).build())
        .expect("slot freed by a finished stream");
    collect(b).reason();
    collect(c).reason();
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn requests_that_can_never_fit_are_invalid() {
    let mut cfg = config(64); // 64 blocks of 4 = 256 tokens
    cfg.max_model_len = 100;
    let (engine, _ctl) = start(cfg.clone());
    let limits = engine.limits();
    assert_eq!(limits.max_model_len, 100);
    let invalid = |r: Req| r.build_with(&limits).err();
    assert!(
        matches!(
            invalid(request(prompt(1, 90), 11)),
            Some(InvalidRequest::TooLong { .. })
        ),
        "90 + 11 > max_model_len 100"
    );
    assert!(
        invalid(request(prompt(1, 90), 10)).is_none(),
        "90 + 10 fits exactly"
    );
    assert_eq!(
        invalid(request(vec![], 4)),
        Some(InvalidRequest::EmptyPrompt)
    );
    assert!(
        matches!(
            invalid(request(vec![1, VOCAB as u32], 4)),
            Some(InvalidRequest::TokenOutOfVocab { .. })
        ),
        "token outside the vocabulary"
    );
    let mut bad = request(prompt(1, 4), 4);
    bad.sampling.temperature = -1.0;
    assert!(
        matches!(invalid(bad), Some(InvalidRequest::Sampling(_))),
        "invalid sampling parameters"
    );
    engine.shutdown(Duration::from_secs(1));

    // The whole KV cache (16 blocks of 4 = 64 tokens) is smaller than max_model_len.
    let (small, _ctl) = start(config(16));
    let limits = small.limits();
    assert_eq!(limits.max_model_len, 64);
    assert!(request(prompt(1, 40), 30).build_with(&limits).is_err());
    let fits = request(prompt(1, 40), 24)
        .build_with(&limits)
        .expect("40 + 24 fits");
    let ok = collect(small.submit(fits).expect("admitted"));
    assert_eq!(ok.usage().prompt_tokens, 40);
    // A request built against looser limits still cannot overrun the engine: it fails.
    let loose = collect(
        small
            .submit(request(prompt(2, 70), 4).build())
            .expect("admitted"),
    );
    assert_eq!(
        loose.failure(),
        kestrel_engine::api::EngineFailure::TooLong(70)
    );
    small.shutdown(Duration::from_secs(1));
}

#[test]
fn handle_is_send_sync_and_stream_is_send() {
    fn send_sync<T: Send + Sync + Clone>() {}
    fn send<T: Send>() {}
    send_sync::<kestrel_engine::handle::EngineHandle>();
    send::<kestrel_engine::handle::ResponseStream>();
    let (engine, _ctl) = start(config(64));
    let clone = engine.clone();
    assert_eq!(clone.config().max_num_seqs, 8);
    let stats = engine.stats();
    assert_eq!((stats.num_kv_blocks, stats.block_size), (64, BLOCK));
    engine.shutdown(Duration::from_secs(1));
}
