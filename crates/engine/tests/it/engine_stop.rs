//! Stop strings, stop tokens and `ignore_eos`, end to end (one letter per token).

use crate::engine_common;

use std::time::Duration;

use engine_common::*;
use kestrel_engine::mock_executor::reference_generate;
use kestrel_engine::request::FinishReason;

/// A prompt whose reference continuation has at least `n` tokens before any EOS.
fn long_running(n: usize) -> (Vec<u32>, Vec<u32>) {
    (0..200)
        .map(|seed| prompt(seed, 9))
        .map(|p| {
            let out = reference_generate(&p, n, &[EOS], VOCAB);
            (p, out)
        })
        .find(|(_, out)| out.len() == n && !out.contains(&EOS))
        .expect("some prompt runs long")
}

#[test]
fn a_stop_string_cuts_the_text_and_frees_the_request() {
    let (engine, _ctl) = start(config(64));
    let (p, out) = long_running(30);
    let full = text_of(&out);
    let stop = full[8..10].to_string();
    let cut = full.find(&stop).expect("present");
    let mut req = request(p, 30);
    req.sampling.stop = vec!["never-produced".into(), stop.clone()];
    let got = collect(engine.submit(req.build()).expect("admitted"));
    assert_eq!(got.reason(), FinishReason::Stop);
    assert_eq!(
        got.text,
        full[..cut],
        "text before the stop string {stop:?}"
    );
    assert_eq!(
        got.ids,
        out[..cut + stop.len()],
        "tokens up to the one completing the stop"
    );
    assert!(wait_until(Duration::from_secs(1), || engine
        .stats()
        .kv_usage
        == 0.0));
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn withheld_partial_stop_text_is_flushed_at_the_end() {
    let (engine, _ctl) = start(config(64));
    let (p, out) = long_running(12);
    let full = text_of(&out);
    // The last letter followed by a character the decoder never produces: the tail is held
    // back as a possible stop string, then released when max_tokens ends the request.
    let stop = format!("{}{{", full.chars().last().expect("non-empty"));
    let mut req = request(p, 12);
    req.sampling.stop = vec![stop];
    let got = collect(engine.submit(req.build()).expect("admitted"));
    assert_eq!(got.reason(), FinishReason::Length);
    assert_eq!(got.text, full);
    engine.shutdown(Duration::from_secs(1));
}

#[test]
fn stop_token_ids_and_ignore_eos() {
    let (engine, _ctl) = start(config(64));
    let (p, out) = long_running(20);
    let mut req = request(p.clone(), 20);
    req.sampling.stop_token_ids = vec![out[5]];
    let first = out.iter().position(|&t| t == out[5]).expect("present");
    let got = collect(engine.submit(req.build()).expect("admitted"));
    assert_eq!(got.reason(), FinishReason::Stop);
    assert_eq!(got.ids, out[..=first]);

    // A prompt whose continuation hits EOS: ignore_eos runs through it to max_tokens.
    let (p, eos_out) = (0..500)
        .map(|seed| prompt(seed, 7))
        .map(|p| {
            let o = reference_generate(&p, 40, &[EOS], VOCAB);
            (p, o)
        })
        .find(|(_, o)| o.last() == Some(&EOS) && o.len() < 40)
        .expect("some prompt hits EOS");
    let stopped = collect(
        engine
            .submit(request(p.clone(), 40).build())
            .expect("admitted"),
    );
    assert_eq!(
        (stopped.ids.clone(), stopped.reason()),
        (eos_out, FinishReason::Stop)
    );
    let mut through = request(p.clone(), 40);
    through.sampling.ignore_eos = true;
    let through = collect(engine.submit(through.build()).expect("admitted"));
    assert_eq!(through.reason(), FinishReason::Length);
    assert_eq!(through.ids, reference_generate(&p, 40, &[], VOCAB));
    engine.shutdown(Duration::from_secs(1));
}
