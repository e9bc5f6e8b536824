//! Fairness guards: a request preempted `max_preemptions` times is no longer a victim of more
//! urgent arrivals, and a long prompt takes at most `contended_prefill_chunk` tokens of a step
//! while other requests wait for their first token.

use std::collections::HashMap;

use kestrel_engine::executor::Executor;
use kestrel_engine::mock_executor::{argmax_rows, reference_generate, MockExecutor};
use kestrel_engine::request::{Request, RequestParams, RequestStatus};
use kestrel_engine::scheduler::{RequestOutput, Scheduler, SchedulerConfig, SchedulerOutput};

const VOCAB: usize = 101;
const BS: usize = 4;

fn req(id: u64, prompt: Vec<u32>, max_tokens: usize, priority: i32) -> Request {
    let mut p = RequestParams::new(max_tokens);
    p.priority = priority;
    Request::new(id, prompt, p)
}

fn step(s: &mut Scheduler, ex: &mut MockExecutor) -> (SchedulerOutput, Vec<RequestOutput>) {
    let out = s.schedule();
    let logits = ex.execute(&out.batch).expect("mock accepts the batch");
    let outs = s.update(&out, &argmax_rows(&logits)).unwrap();
    for o in &outs {
        if let Some(reason) = o.stop {
            assert!(s.finish(o.request_id, reason).is_some());
        }
    }
    (out, outs)
}

fn shape(out: &SchedulerOutput) -> Vec<(u64, usize, usize)> {
    let seqs = &out.batch.seqs;
    seqs.iter()
        .map(|s| (s.request_id, s.start_pos, s.tokens.len()))
        .collect()
}

/// A background request (priority 5) runs; whenever it runs, an urgent request (priority -1)
/// needing the whole pool arrives. Returns how often the background request was preempted and
/// its tokens.
fn urgent_stream(max_preemptions: Option<u32>) -> (usize, Vec<u32>) {
    let cfg = SchedulerConfig {
        block_size: BS,
        max_num_batched_tokens: 64,
        enable_prefix_caching: false,
        max_preemptions,
        ..SchedulerConfig::new(4)
    };
    let mut s = Scheduler::new(cfg).unwrap();
    let mut ex = MockExecutor::new(4, BS, VOCAB);
    s.add_request(req(1, vec![1, 2, 3, 4], 8, 5)).unwrap();
    let (mut next, mut preempted) = (100u64, 0);
    let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
    for _ in 0..200 {
        if !s.has_unfinished() {
            break;
        }
        let running = s.request(1).map(Request::status) == Some(RequestStatus::Running);
        if running && s.waiting_ids().is_empty() {
            s.add_request(req(next, (20..35).collect(), 1, -1)).unwrap();
            next += 1;
        }
        let (out, outs) = step(&mut s, &mut ex);
        preempted += out.preempted.iter().filter(|&&id| id == 1).count();
        for o in outs {
            tokens.entry(o.request_id).or_default().push(o.token);
        }
    }
    assert!(!s.has_unfinished(), "did not finish");
    (preempted, tokens.remove(&1).unwrap_or_default())
}

#[test]
fn a_request_preempted_max_times_is_spared() {
    let (preempted, tokens) = urgent_stream(Some(3));
    assert_eq!(preempted, 3);
    assert_eq!(tokens, reference_generate(&[1, 2, 3, 4], 8, &[], VOCAB));
}

#[test]
fn without_the_guard_urgent_arrivals_preempt_every_time() {
    let (preempted, tokens) = urgent_stream(None);
    assert!(preempted > 3, "preempted {preempted} times");
    assert_eq!(tokens, reference_generate(&[1, 2, 3, 4], 8, &[], VOCAB));
}

fn contended(cap: Option<usize>) -> (Scheduler, MockExecutor) {
    let cfg = SchedulerConfig {
        block_size: BS,
        max_num_batched_tokens: 32,
        enable_prefix_caching: false,
        contended_prefill_chunk: cap,
        ..SchedulerConfig::new(64)
    };
    let mut s = Scheduler::new(cfg).unwrap();
    s.add_request(req(1, (0..60).collect(), 2, 0)).unwrap();
    s.add_request(req(2, vec![70, 71, 72, 73], 2, 0)).unwrap();
    (s, MockExecutor::new(64, BS, VOCAB))
}

#[test]
fn a_long_prompt_leaves_room_for_a_waiting_one() {
    let (mut s, mut ex) = contended(Some(16));
    let (o1, _) = step(&mut s, &mut ex);
    assert_eq!(shape(&o1), vec![(1, 0, 16), (2, 0, 4)]);
    // Nobody else waits for a first token now: the long prompt takes the whole budget.
    let (o2, _) = step(&mut s, &mut ex);
    assert_eq!(shape(&o2)[0], (1, 16, 32));
    let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
    for _ in 0..20 {
        for o in step(&mut s, &mut ex).1 {
            tokens.entry(o.request_id).or_default().push(o.token);
        }
    }
    assert!(!s.has_unfinished());
    let long: Vec<u32> = (0..60).collect();
    assert_eq!(tokens[&1], reference_generate(&long, 2, &[], VOCAB));
}

#[test]
fn without_the_cap_the_long_prompt_takes_the_step() {
    let (mut s, mut ex) = contended(None);
    let (o1, _) = step(&mut s, &mut ex);
    assert_eq!(shape(&o1), vec![(1, 0, 32)]);
}

#[test]
fn zero_cap_is_refused() {
    let cfg = SchedulerConfig {
        contended_prefill_chunk: Some(0),
        ..SchedulerConfig::new(8)
    };
    assert!(Scheduler::new(cfg).is_err());
}
