//! Step traces ([`kestrel_engine::step_trace`]): a watcher of the engine's steps hears of every
//! step a traced request takes part in — each prefill chunk with its token count, then one
//! decode step per token after the first — under the request's trace parent, and of nothing
//! an untraced request does.

use crate::engine_common;

use std::sync::Arc;

use engine_common::*;
use kestrel_engine::core::EngineCore;
use kestrel_engine::step_trace::StepTrace;
use kestrel_engine::trace_parent::TraceParent;
use tokio::sync::mpsc::unbounded_channel;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn traced_requests_report_each_prefill_chunk_and_decode_step() {
    let cfg = config(256);
    let (exec, _ctl) = controlled(&cfg);
    let mut core = EngineCore::new(
        Box::new(exec),
        Arc::new(LetterDecoder),
        vec![EOS],
        &cfg.engine(),
    )
    .expect("valid config");
    let (sink, mut steps) = tokio::sync::mpsc::channel(256);
    core.watch_steps(sink);
    let parent = TraceParent::parse(PARENT).expect("valid");

    // 100 prompt tokens take two chunks at 64 tokens a step.
    let mut traced = request(prompt(1, 100), 5);
    traced.sampling.ignore_eos = true;
    let mut plain = request(prompt(2, 10), 5);
    plain.sampling.ignore_eos = true;
    let (tx1, _rx1) = unbounded_channel();
    let (tx2, _rx2) = unbounded_channel();
    core.admit(1, traced.build().with_trace(Some(parent)), tx1)
        .expect("admitted");
    core.admit(2, plain.build(), tx2).expect("admitted");
    while core.has_unfinished() {
        core.step();
    }

    let mut got: Vec<StepTrace> = Vec::new();
    while let Ok(step) = steps.try_recv() {
        got.push(step);
    }
    assert!(got.iter().all(|s| !s.seqs.is_empty() && s.start <= s.end));
    assert!(
        got.iter().any(|s| s.batch_seqs == 2),
        "the two requests shared steps"
    );
    let seqs: Vec<_> = got.iter().flat_map(|s| s.seqs.iter().copied()).collect();
    assert!(
        seqs.iter().all(|s| s.request == 1 && s.trace == parent),
        "only the traced request is reported: {seqs:?}"
    );
    let prefill: Vec<usize> = seqs
        .iter()
        .filter(|s| s.prefill)
        .map(|s| s.tokens)
        .collect();
    assert!(
        prefill.len() >= 2,
        "the prompt took several chunks: {prefill:?}"
    );
    assert_eq!(prefill.iter().sum::<usize>(), 100);
    let decode: Vec<usize> = seqs
        .iter()
        .filter(|s| !s.prefill)
        .map(|s| s.tokens)
        .collect();
    assert_eq!(
        decode,
        vec![1; 4],
        "one decode step per token after the first"
    );
    let first_decode = seqs.iter().position(|s| !s.prefill).expect("decoded");
    assert!(
        seqs[first_decode..].iter().all(|s| !s.prefill),
        "prefill comes first"
    );
}
