//! Preemption under KV pressure: victim order (lowest priority, latest arrival), preemption on
//! behalf of higher-priority waiting requests only, and preempted requests completing with the
//! same outputs as an unpreempted run.

use std::collections::HashMap;

use kestrel_engine::executor::Executor;
use kestrel_engine::mock_executor::{argmax_rows, reference_generate, MockExecutor};
use kestrel_engine::request::{Request, RequestParams};
use kestrel_engine::scheduler::{RequestOutput, Scheduler, SchedulerConfig, SchedulerOutput};

const VOCAB: usize = 101;
const BS: usize = 4;

fn setup(num_blocks: usize, caching: bool) -> (Scheduler, MockExecutor) {
    let cfg = SchedulerConfig {
        block_size: BS,
        max_num_batched_tokens: 64,
        enable_prefix_caching: caching,
        ..SchedulerConfig::new(num_blocks)
    };
    (
        Scheduler::new(cfg).unwrap(),
        MockExecutor::new(num_blocks, BS, VOCAB),
    )
}

fn step(s: &mut Scheduler, ex: &mut MockExecutor) -> (SchedulerOutput, Vec<RequestOutput>) {
    let out = s.schedule();
    let logits = ex.execute(&out.batch).expect("mock accepts the batch");
    let outs = s.update(&out, &argmax_rows(&logits)).unwrap();
    finish_stopped(s, &outs);
    s.kv().pool().check_invariants().unwrap();
    (out, outs)
}

/// Ends the requests whose token-level stop rule fired (the engine's job, done by hand here).
fn finish_stopped(s: &mut Scheduler, outs: &[RequestOutput]) {
    for o in outs {
        if let Some(reason) = o.stop {
            assert!(s.finish(o.request_id, reason).is_some());
        }
    }
}

fn req(id: u64, prompt: Vec<u32>, max_tokens: usize, priority: i32) -> Request {
    let mut p = RequestParams::new(max_tokens);
    p.priority = priority;
    Request::new(id, prompt, p)
}

fn shape(out: &SchedulerOutput) -> Vec<(u64, usize, usize)> {
    out.batch
        .seqs
        .iter()
        .map(|s| (s.request_id, s.start_pos, s.tokens.len()))
        .collect()
}

/// Runs to completion; returns every preemption in order and each request's tokens.
fn drain(
    s: &mut Scheduler,
    ex: &mut MockExecutor,
    mut tokens: HashMap<u64, Vec<u32>>,
) -> (Vec<u64>, HashMap<u64, Vec<u32>>) {
    let mut preempted = Vec::new();
    for _ in 0..1000 {
        if !s.has_unfinished() {
            return (preempted, tokens);
        }
        let (out, outs) = step(s, ex);
        preempted.extend(&out.preempted);
        for o in outs {
            tokens.entry(o.request_id).or_default().push(o.token);
        }
    }
    panic!("did not finish");
}

#[test]
fn victims_are_lowest_priority_latest_first_and_outputs_match() {
    for caching in [false, true] {
        let (mut s, mut ex) = setup(6, caching);
        s.add_request(req(1, vec![1, 2, 3, 4], 12, -1)).unwrap();
        s.add_request(req(2, vec![5, 6, 7, 8], 12, 0)).unwrap();
        s.add_request(req(3, vec![9, 10, 11, 12], 12, 0)).unwrap();
        let (preempted, tokens) = drain(&mut s, &mut ex, HashMap::new());
        assert_eq!(&preempted[..2], &[3, 2], "caching={caching}");
        assert!(
            !preempted.contains(&1),
            "the high-priority request is never preempted"
        );
        for (id, prompt) in [(1, [1, 2, 3, 4]), (2, [5, 6, 7, 8]), (3, [9, 10, 11, 12])] {
            assert_eq!(
                tokens[&id],
                reference_generate(&prompt, 12, &[], VOCAB),
                "request {id}"
            );
        }
        assert_eq!(s.stats().num_preemptions, preempted.len() as u64);
        assert_eq!(s.kv().num_free_blocks(), 6);
    }
}

#[test]
fn requester_preempts_itself_when_it_is_the_latest() {
    let (mut s, mut ex) = setup(4, false);
    s.add_request(req(1, vec![1, 2, 3, 4], 3, 0)).unwrap();
    s.add_request(req(2, (10..18).collect(), 3, 0)).unwrap();
    let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
    let (o1, r1) = step(&mut s, &mut ex);
    assert_eq!(shape(&o1), vec![(1, 0, 4), (2, 0, 8)]);
    let (o2, r2) = step(&mut s, &mut ex);
    // Request 1 takes the last block; request 2 then needs one and is itself the victim.
    assert_eq!(shape(&o2), vec![(1, 4, 1)]);
    assert_eq!(o2.preempted, vec![2]);
    assert_eq!(s.waiting_ids(), vec![2]);
    assert_eq!(s.request(2).unwrap().num_computed_tokens(), 0);
    assert_eq!(s.request(2).unwrap().block_table(), &[] as &[u32]);
    for o in r1.into_iter().chain(r2) {
        tokens.entry(o.request_id).or_default().push(o.token);
    }
    let (_, tokens) = drain(&mut s, &mut ex, tokens);
    let prompt2: Vec<u32> = (10..18).collect();
    assert_eq!(tokens[&2], reference_generate(&prompt2, 3, &[], VOCAB));
    assert_eq!(tokens[&1], reference_generate(&[1, 2, 3, 4], 3, &[], VOCAB));
}

#[test]
fn already_scheduled_victim_is_unscheduled() {
    let (mut s, mut ex) = setup(4, false);
    s.add_request(req(1, (0..7).collect(), 10, 0)).unwrap();
    step(&mut s, &mut ex);
    s.add_request(req(2, vec![20, 21, 22, 23], 10, -5)).unwrap();
    let (o2, _) = step(&mut s, &mut ex);
    assert_eq!(shape(&o2), vec![(1, 7, 1), (2, 0, 4)]);
    // Request 1 gets the last block, then request 2 (higher priority) needs one: request 1
    // is preempted and its already-scheduled token is withdrawn from the batch.
    let (o3, _) = step(&mut s, &mut ex);
    assert_eq!(shape(&o3), vec![(2, 4, 1)]);
    assert_eq!(o3.preempted, vec![1]);
    assert_eq!(s.request(2).unwrap().block_table().len(), 2);
    assert_eq!(s.kv().num_free_blocks(), 2);
}

#[test]
fn higher_priority_waiting_request_preempts_lower_running() {
    let (mut s, mut ex) = setup(4, true);
    let low_prompt: Vec<u32> = (0..12).collect();
    s.add_request(req(1, low_prompt.clone(), 8, 0)).unwrap();
    let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
    for _ in 0..2 {
        for o in step(&mut s, &mut ex).1 {
            tokens.entry(o.request_id).or_default().push(o.token);
        }
    }
    assert_eq!(s.kv().num_free_blocks(), 0);
    s.add_request(req(2, vec![40, 41, 42, 43, 44, 45], 2, -5))
        .unwrap();
    let (o3, r3) = step(&mut s, &mut ex);
    assert_eq!(o3.preempted, vec![1]);
    assert_eq!(shape(&o3), vec![(2, 0, 6)]);
    for o in r3 {
        tokens.entry(o.request_id).or_default().push(o.token);
    }
    let (_, tokens) = drain(&mut s, &mut ex, tokens);
    // Context limit 16 = 4 blocks x 4: the low request stops at 4 outputs.
    assert_eq!(tokens[&1], reference_generate(&low_prompt, 4, &[], VOCAB));
    assert_eq!(
        tokens[&2],
        reference_generate(&[40, 41, 42, 43, 44, 45], 2, &[], VOCAB)
    );
    assert!(
        s.stats().prefix_cache.hits > 0,
        "the preempted request reuses its cached blocks"
    );
}

#[test]
fn equal_priority_waiting_request_never_preempts() {
    let (mut s, mut ex) = setup(4, false);
    s.add_request(req(1, (0..12).collect(), 8, 0)).unwrap();
    step(&mut s, &mut ex);
    step(&mut s, &mut ex);
    s.add_request(req(2, vec![40, 41, 42, 43, 44, 45], 2, 0))
        .unwrap();
    let mut first_seen = None;
    for i in 0..20 {
        let (out, _) = step(&mut s, &mut ex);
        assert!(out.preempted.is_empty());
        if first_seen.is_none() && out.batch.seqs.iter().any(|q| q.request_id == 2) {
            first_seen = Some(i);
            assert!(
                s.request(1).is_none(),
                "request 2 only runs once request 1 is done"
            );
        }
        if !s.has_unfinished() {
            break;
        }
    }
    assert!(first_seen.is_some());
    assert!(!s.has_unfinished());
}
