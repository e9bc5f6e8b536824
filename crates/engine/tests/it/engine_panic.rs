//! A panic inside a step does not end streams as if they had finished: every request in flight
//! gets a failure event, later submissions are refused, and the handle reports the engine dead
//! so the process can fail its health check.

use crate::engine_common;

use std::time::Duration;

use engine_common::*;
use kestrel_engine::api::{EngineFailure, SubmitError};

#[test]
fn a_panicking_step_fails_in_flight_requests_and_the_engine_is_dead() {
    let (engine, ctl) = start(config(64));
    assert!(engine.is_alive());
    ctl.pause();
    let a = engine
        .submit(request(prompt(1, 5), 10).build())
        .expect("admitted");
    ctl.wait_blocked();
    let b = engine
        .submit(request(prompt(2, 7), 10).build())
        .expect("admitted");
    ctl.panic_at_step(1);
    ctl.resume();
    let (a, b) = (collect(a), collect(b));
    for c in [&a, &b] {
        match c.failure() {
            EngineFailure::Internal(m) => assert!(m.contains("injected panic"), "{m}"),
            other => panic!("expected an internal failure, got {other:?}"),
        }
    }
    assert!(wait_until(Duration::from_secs(2), || !engine.is_alive()));
    let refused = engine.submit(request(prompt(3, 4), 2).build());
    assert!(
        matches!(refused, Err(SubmitError::Stopped)),
        "submit after the panic"
    );
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn a_healthy_engine_is_alive_until_shutdown() {
    let (engine, _ctl) = start(config(64));
    let c = collect(
        engine
            .submit(request(prompt(1, 5), 3).build())
            .expect("admitted"),
    );
    assert_eq!(c.ids.len(), 3);
    assert!(engine.is_alive());
    engine.shutdown(Duration::from_secs(1));
    assert!(!engine.is_alive());
}
