//! Scheduler tests with the mock executor: chunked prefill, mixed batches, priority admission,
//! prefix caching through the scheduler, and abort.

use kestrel_engine::executor::Executor;
use kestrel_engine::mock_executor::{argmax_rows, reference_generate, MockExecutor};
use kestrel_engine::request::{FinishReason, Request, RequestParams};
use kestrel_engine::scheduler::{
    RequestOutput, Scheduler, SchedulerConfig, SchedulerError, SchedulerOutput,
};

const VOCAB: usize = 97;

fn config(num_blocks: usize, block_size: usize, budget: usize) -> SchedulerConfig {
    SchedulerConfig {
        block_size,
        max_num_batched_tokens: budget,
        ..SchedulerConfig::new(num_blocks)
    }
}

fn setup(cfg: SchedulerConfig) -> (Scheduler, MockExecutor) {
    let ex = MockExecutor::new(cfg.num_kv_blocks, cfg.block_size, VOCAB);
    (Scheduler::new(cfg).unwrap(), ex)
}

fn step(s: &mut Scheduler, ex: &mut MockExecutor) -> (SchedulerOutput, Vec<RequestOutput>) {
    let out = s.schedule();
    let logits = ex.execute(&out.batch).expect("mock accepts the batch");
    let outs = s.update(&out, &argmax_rows(&logits)).unwrap();
    finish_stopped(s, &outs);
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

/// (request id, start_pos, number of tokens, wants logits) per scheduled sequence.
fn shape(out: &SchedulerOutput) -> Vec<(u64, usize, usize, bool)> {
    out.batch
        .seqs
        .iter()
        .map(|s| (s.request_id, s.start_pos, s.tokens.len(), s.num_logits > 0))
        .collect()
}

fn run_to_completion(s: &mut Scheduler, ex: &mut MockExecutor) -> Vec<RequestOutput> {
    let mut all = Vec::new();
    for _ in 0..10_000 {
        if !s.has_unfinished() {
            return all;
        }
        all.extend(step(s, ex).1);
    }
    panic!("requests did not finish");
}

fn tokens_of(outs: &[RequestOutput], id: u64) -> Vec<u32> {
    outs.iter()
        .filter(|o| o.request_id == id)
        .map(|o| o.token)
        .collect()
}

#[test]
fn chunked_prefill_splits_long_prompt_under_budget() {
    let (mut s, mut ex) = setup(config(64, 4, 8));
    let prompt: Vec<u32> = (1..=20).collect();
    s.add_request(req(1, prompt.clone(), 3, 0)).unwrap();
    let (o1, r1) = step(&mut s, &mut ex);
    assert_eq!(shape(&o1), vec![(1, 0, 8, false)]);
    assert_eq!(o1.batch.seqs[0].block_table, vec![0, 1]);
    assert!(r1.is_empty());
    let (o2, _) = step(&mut s, &mut ex);
    assert_eq!(shape(&o2), vec![(1, 8, 8, false)]);
    assert_eq!(o2.batch.seqs[0].block_table, vec![0, 1, 2, 3]);
    let (o3, r3) = step(&mut s, &mut ex);
    assert_eq!(shape(&o3), vec![(1, 16, 4, true)]);
    assert_eq!(r3.len(), 1);
    let rest = run_to_completion(&mut s, &mut ex);
    let mut got = vec![r3[0].token];
    got.extend(tokens_of(&rest, 1));
    assert_eq!(got, reference_generate(&prompt, 3, &[], VOCAB));
    assert_eq!(rest.last().unwrap().stop, Some(FinishReason::Length));
    assert_eq!(s.kv().num_free_blocks(), 64);
}

#[test]
fn decode_tokens_mix_with_prefill_chunks() {
    let (mut s, mut ex) = setup(config(64, 4, 8));
    s.add_request(req(1, vec![5, 6, 7, 8, 9], 10, 0)).unwrap();
    assert_eq!(shape(&step(&mut s, &mut ex).0), vec![(1, 0, 5, true)]);
    s.add_request(req(2, (30..50).collect(), 2, 0)).unwrap();
    // Running request's decode token first, then a 7-token chunk of the new prompt.
    assert_eq!(
        shape(&step(&mut s, &mut ex).0),
        vec![(1, 5, 1, true), (2, 0, 7, false)]
    );
    assert_eq!(
        shape(&step(&mut s, &mut ex).0),
        vec![(1, 6, 1, true), (2, 7, 7, false)]
    );
    assert_eq!(
        shape(&step(&mut s, &mut ex).0),
        vec![(1, 7, 1, true), (2, 14, 6, true)]
    );
    assert_eq!(
        shape(&step(&mut s, &mut ex).0),
        vec![(1, 8, 1, true), (2, 20, 1, true)]
    );
    let outs = run_to_completion(&mut s, &mut ex);
    assert!(outs.iter().any(|o| o.request_id == 1 && o.stop.is_some()));
}

#[test]
fn long_prefill_threshold_caps_chunks() {
    let mut cfg = config(64, 4, 32);
    cfg.long_prefill_threshold = Some(5);
    let (mut s, mut ex) = setup(cfg);
    s.add_request(req(1, (0..12).collect(), 1, 0)).unwrap();
    s.add_request(req(2, (20..24).collect(), 1, 0)).unwrap();
    assert_eq!(
        shape(&step(&mut s, &mut ex).0),
        vec![(1, 0, 5, false), (2, 0, 4, true)]
    );
    assert_eq!(shape(&step(&mut s, &mut ex).0), vec![(1, 5, 5, false)]);
    assert_eq!(shape(&step(&mut s, &mut ex).0), vec![(1, 10, 2, true)]);
    assert!(!s.has_unfinished());
}

#[test]
fn without_chunking_prompts_wait_for_budget_and_long_ones_are_rejected() {
    let mut cfg = config(64, 4, 8);
    cfg.enable_chunked_prefill = false;
    let (mut s, mut ex) = setup(cfg);
    let err = s.add_request(req(9, (0..8).collect(), 4, 0)).unwrap_err();
    assert_eq!(
        err,
        SchedulerError::PromptTooLong {
            id: 9,
            len: 8,
            max: 7
        }
    );
    s.add_request(req(1, (0..6).collect(), 4, 0)).unwrap();
    s.add_request(req(2, (10..17).collect(), 4, 0)).unwrap();
    assert_eq!(shape(&step(&mut s, &mut ex).0), vec![(1, 0, 6, true)]);
    // 1 decode token leaves 7 of budget: exactly request 2's prompt.
    let (out, outs) = step(&mut s, &mut ex);
    assert_eq!(shape(&out), vec![(1, 6, 1, true), (2, 0, 7, true)]);
    // Both reach the context limit of 8 tokens (clamped to the budget without chunking).
    assert!(outs.iter().all(|o| o.stop == Some(FinishReason::Length)));
    assert_eq!(outs.len(), 2);
    assert!(!s.has_unfinished());
}

#[test]
fn higher_priority_waiting_request_is_admitted_first() {
    // Request 3 has the lowest value (-5): it is the most urgent.
    let mut cfg = config(64, 4, 64);
    cfg.max_num_seqs = 1;
    let (mut s, mut ex) = setup(cfg);
    s.add_request(req(1, vec![1, 2, 3], 2, 0)).unwrap();
    s.add_request(req(2, vec![4, 5, 6], 2, 0)).unwrap();
    s.add_request(req(3, vec![7, 8, 9], 2, -5)).unwrap();
    assert_eq!(s.waiting_ids(), vec![3, 1, 2]);
    let mut admitted = Vec::new();
    while s.has_unfinished() {
        let (out, _) = step(&mut s, &mut ex);
        for seq in &out.batch.seqs {
            if seq.start_pos == 0 {
                admitted.push(seq.request_id);
            }
            assert_eq!(out.batch.seqs.len(), 1, "max_num_seqs = 1");
        }
    }
    assert_eq!(admitted, vec![3, 1, 2]);
}

#[test]
fn scheduler_shares_system_prompt_blocks() {
    let (mut s, mut ex) = setup(config(32, 4, 64));
    let sys: Vec<u32> = (60..72).collect();
    let prompt2 = [&sys[..], &[3, 4, 5]].concat();
    s.add_request(req(1, [&sys[..], &[1, 2]].concat(), 3, 0))
        .unwrap();
    let (o1, _) = step(&mut s, &mut ex);
    assert_eq!(o1.batch.seqs[0].block_table, vec![0, 1, 2, 3]);
    s.add_request(req(2, prompt2.clone(), 3, 0)).unwrap();
    let (o2, r2) = step(&mut s, &mut ex);
    assert_eq!(shape(&o2), vec![(1, 14, 1, true), (2, 12, 3, true)]);
    assert_eq!(o2.batch.seqs[1].block_table, vec![0, 1, 2, 4]);
    assert_eq!(s.kv().pool().ref_count(0), 2);
    let stats = s.stats().prefix_cache;
    assert_eq!((stats.queries, stats.hits), (14 + 15, 12));
    let outs = [r2, run_to_completion(&mut s, &mut ex)].concat();
    assert_eq!(
        tokens_of(&outs, 2),
        reference_generate(&prompt2, 3, &[], VOCAB)
    );
    // 14 + (1 + 3) + (1 + 1) + 1: the 12 cached tokens of request 2 are never recomputed.
    assert_eq!(ex.tokens_computed(), 21);
}

#[test]
fn abort_frees_every_block_waiting_or_running() {
    let (mut s, mut ex) = setup(config(16, 4, 8));
    s.add_request(req(1, (0..10).collect(), 50, 0)).unwrap();
    s.add_request(req(2, (0..10).collect(), 50, 0)).unwrap();
    s.add_request(req(3, (40..45).collect(), 50, 0)).unwrap();
    step(&mut s, &mut ex);
    step(&mut s, &mut ex);
    assert!(s.kv().num_free_blocks() < 16);
    assert!(s.abort(1).is_some());
    assert!(s.abort(1).is_none());
    assert!(s.abort(3).is_some());
    for _ in 0..3 {
        step(&mut s, &mut ex);
    }
    assert!(s.abort(2).is_some());
    assert!(!s.has_unfinished());
    assert_eq!(s.kv().num_free_blocks(), 16);
    assert_eq!(s.kv().usage(), 0.0);
    assert_eq!(s.kv().num_tables(), 0);
    assert!((0..16).all(|b| s.kv().pool().ref_count(b) == 0));
    s.kv().pool().check_invariants().unwrap();
}

#[test]
fn abort_between_schedule_and_update_is_ignored() {
    let (mut s, mut ex) = setup(config(16, 4, 32));
    s.add_request(req(1, vec![1, 2, 3], 5, 0)).unwrap();
    s.add_request(req(2, vec![4, 5, 6], 5, 0)).unwrap();
    let out = s.schedule();
    let sampled = argmax_rows(&ex.execute(&out.batch).unwrap());
    assert!(s.abort(1).is_some());
    let outs = s.update(&out, &sampled).unwrap();
    assert_eq!(
        outs.iter().map(|o| o.request_id).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(
        s.update(&out, &sampled[..1]).unwrap_err(),
        SchedulerError::SampledCountMismatch {
            expected: 2,
            got: 1
        }
    );
}

#[test]
fn eos_and_stop_tokens_finish_with_stop() {
    let (mut s, mut ex) = setup(config(16, 4, 32));
    let prompt = vec![3, 1, 4, 1, 5];
    let expected = reference_generate(&prompt, 6, &[], VOCAB);
    let mut p = RequestParams::new(6);
    p.eos_token_ids = vec![expected[2]];
    s.add_request(Request::new(1, prompt.clone(), p)).unwrap();
    let outs = run_to_completion(&mut s, &mut ex);
    let got = tokens_of(&outs, 1);
    let first_eos = expected.iter().position(|&t| t == expected[2]).unwrap();
    assert_eq!(got, expected[..=first_eos].to_vec());
    assert_eq!(outs.last().unwrap().stop, Some(FinishReason::Stop));
}

#[test]
fn kv_fragmentation_counts_unused_tails_and_blocks_only_the_cache_keeps() {
    let (mut s, mut ex) = setup(config(16, 16, 512));
    assert_eq!(s.stats().kv_fragmentation, 0.0, "an empty cache");
    // 20 prompt tokens computed in two blocks of 16: 12 slots of the second unused.
    s.add_request(req(1, (1..=20).collect(), 3, 0)).unwrap();
    step(&mut s, &mut ex);
    let held = 16 - s.stats().kv_free_blocks;
    assert_eq!(held, 2);
    assert!(
        (s.stats().kv_fragmentation - 12.0 / 32.0).abs() < 1e-9,
        "{:?}",
        s.stats()
    );
    run_to_completion(&mut s, &mut ex);
    // Finished: only the prefix cache keeps its one full block, which no sequence reads.
    assert_eq!(s.stats().kv_free_blocks, 16);
    assert_eq!(s.stats().kv_fragmentation, 1.0, "{:?}", s.stats());
    // A new request reusing that block reads it again.
    s.add_request(req(2, (1..=20).collect(), 3, 0)).unwrap();
    step(&mut s, &mut ex);
    assert!(
        (s.stats().kv_fragmentation - 12.0 / 32.0).abs() < 1e-9,
        "{:?}",
        s.stats()
    );
}
