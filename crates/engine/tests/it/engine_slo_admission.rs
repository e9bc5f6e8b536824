//! First-token objectives at admission: [`EngineCore::admit`] refuses a request whose
//! objective the predictor says cannot be met (a deep queue against 1 ms), admits it on an idle
//! engine, and never refuses requests without an objective; [`EngineHandle`] hands the refusal
//! back through the stream's admission answer and its events.

use crate::engine_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use engine_common::*;
use kestrel_engine::api::{EngineEvent, EngineFailure, EngineRequest};
use kestrel_engine::core::EngineCore;
use kestrel_engine::handle::{EngineHandle, EngineOptions, SloAdmission};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Each executor step sleeps this long, so step costs are measurable.
const STEP: Duration = Duration::from_millis(2);

fn core() -> EngineCore {
    let cfg = config(256);
    let (exec, ctl) = controlled(&cfg);
    ctl.set_delay(STEP);
    EngineCore::new(
        Box::new(exec),
        Arc::new(LetterDecoder),
        vec![EOS],
        &cfg.engine(),
    )
    .expect("valid config")
}

fn long(seed: u32) -> EngineRequest {
    let mut r = request(prompt(seed, 60), 40);
    r.sampling.ignore_eos = true;
    r.build()
}

fn with_slo(seed: u32, slo: Duration) -> EngineRequest {
    long(seed).with_ttft_slo(Some(slo))
}

/// Runs one request to its end so the predictor has measured prompt and decode steps.
fn warm_up(core: &mut EngineCore) {
    let (tx, _rx) = unbounded_channel();
    core.admit(1000, long(99), tx).expect("admitted");
    while core.has_unfinished() {
        core.step();
    }
    assert!(core.predictor().prefill_rate().is_some());
    assert!(core.predictor().decode_step().is_some());
}

/// Queues `n` long requests without an objective (nothing runs yet).
fn queue(core: &mut EngineCore, n: u64) -> Vec<UnboundedReceiver<EngineEvent>> {
    (0..n)
        .map(|i| {
            let (tx, rx) = unbounded_channel();
            core.admit(i, long(i as u32), tx)
                .expect("no objective: admitted");
            rx
        })
        .collect()
}

#[test]
fn a_deep_queue_cannot_meet_one_millisecond() {
    let mut core = core();
    warm_up(&mut core);
    let _queued = queue(&mut core, 8);
    let (tx, mut rx) = unbounded_channel();
    let refused = core.admit(50, with_slo(50, Duration::from_millis(1)), tx);
    let Err(EngineFailure::SloUnattainable {
        predicted_ms,
        objective_ms,
    }) = refused
    else {
        panic!("expected a refusal, got {refused:?}");
    };
    assert_eq!(objective_ms, 1);
    // 8 × 60 queued prompt tokens at 64 a step, each step at least 2 ms.
    assert!(predicted_ms >= 8 * 2, "predicted {predicted_ms} ms");
    assert!(matches!(
        rx.try_recv(),
        Ok(EngineEvent::Failed(EngineFailure::SloUnattainable { .. }))
    ));
    assert_eq!(
        core.stats().waiting,
        8,
        "the refused request was not queued"
    );
    // A generous objective behind the same queue is admitted.
    let (tx, _rx) = unbounded_channel();
    core.admit(51, with_slo(51, Duration::from_secs(60)), tx)
        .expect("60 s is plenty");
    assert_eq!(core.stats().waiting, 9);
}

#[test]
fn an_idle_engine_admits_and_meets_the_objective() {
    let mut core = core();
    warm_up(&mut core);
    let (tx, mut rx) = unbounded_channel();
    let arrival = Instant::now();
    core.admit(7, with_slo(7, Duration::from_secs(2)), tx)
        .expect("an idle engine admits a 2 s objective");
    while core.has_unfinished() {
        core.step();
    }
    let mut tokens = 0;
    while let Ok(ev) = rx.try_recv() {
        match ev {
            EngineEvent::Token(_) => tokens += 1,
            EngineEvent::Finished { timings, .. } => {
                assert!(timings.time_to_first_token <= Duration::from_secs(2));
            }
            EngineEvent::Failed(f) => panic!("failed: {f}"),
        }
    }
    assert_eq!(tokens, 40);
    assert!(arrival.elapsed() > STEP);
}

#[test]
fn requests_without_an_objective_are_never_refused() {
    let mut core = core();
    warm_up(&mut core);
    let rxs = queue(&mut core, 30);
    assert_eq!(core.stats().waiting, 30);
    drop(rxs);
}

#[test]
fn before_any_step_is_measured_the_engine_admits() {
    let mut core = core();
    let _queued = queue(&mut core, 8);
    let (tx, _rx) = unbounded_channel();
    core.admit(50, with_slo(50, Duration::from_millis(200)), tx)
        .expect("nothing measured: no prediction, admitted");
    // An objective that has already passed on arrival is refused even so.
    let (tx, _rx) = unbounded_channel();
    let late = with_slo(51, Duration::from_millis(1))
        .with_arrival(Instant::now() - Duration::from_millis(50));
    assert!(matches!(
        core.admit(51, late, tx),
        Err(EngineFailure::SloUnattainable { .. })
    ));
}

#[test]
fn with_admission_off_objectives_are_only_counted() {
    let mut core = core().with_slo_admission(false);
    warm_up(&mut core);
    let _queued = queue(&mut core, 8);
    let (tx, _rx) = unbounded_channel();
    core.admit(50, with_slo(50, Duration::from_millis(1)), tx)
        .expect("admission checks are off");
}

#[test]
fn the_handle_answers_admission_and_fails_the_stream() {
    let cfg = config(256);
    let (exec, ctl) = controlled(&cfg);
    ctl.set_delay(STEP);
    let engine = EngineHandle::try_start_with(
        Box::new(exec),
        Arc::new(LetterDecoder),
        vec![EOS],
        cfg.engine(),
        EngineOptions {
            slo_admission: SloAdmission::Enforce,
            ..EngineOptions::default()
        },
    )
    .expect("engine starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    // Warm up the predictor, then hold the engine on a step while a queue builds.
    collect(engine.submit(long(99)).expect("submitted"));
    ctl.pause();
    let busy: Vec<_> = (0..8)
        .map(|i| engine.submit(long(i)).expect("submitted"))
        .collect();
    let mut plain = engine.submit(long(40)).expect("submitted");
    let mut strict = engine
        .submit(with_slo(41, Duration::from_millis(1)))
        .expect("submitted");
    ctl.resume();
    let answer = rt.block_on(strict.admitted());
    assert!(
        matches!(answer, Err(EngineFailure::SloUnattainable { .. })),
        "{answer:?}"
    );
    assert!(matches!(
        strict.blocking_next(),
        Some(EngineEvent::Failed(EngineFailure::SloUnattainable { .. }))
    ));
    assert_eq!(rt.block_on(plain.admitted()), Ok(()), "no objective");
    let mut relaxed = engine
        .submit(with_slo(42, Duration::from_secs(120)))
        .expect("submitted");
    assert_eq!(rt.block_on(relaxed.admitted()), Ok(()));
    drop((busy, plain, relaxed));
    engine.shutdown(Duration::from_secs(1));
}
