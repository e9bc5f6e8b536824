//! Releasing KV blocks that fell out of the attention window of every layer: a sequence's
//! blocks stay bounded by the window however long it runs, outputs are exactly those of a run
//! that keeps every block, nothing leaks through finish, abort or preemption, shared prefix
//! blocks only lose one reference, and a sequence longer than the whole pool completes.

use std::collections::HashMap;

use kestrel_engine::executor::Executor;
use kestrel_engine::kv::{
    AttentionWindow, ComputedBlocks, KvCacheConfig, KvCacheManager, NO_BLOCK,
};
use kestrel_engine::mock_executor::{argmax_rows, reference_generate_windowed, MockExecutor};
use kestrel_engine::request::{Request, RequestParams};
use kestrel_engine::scheduler::{RequestOutput, Scheduler, SchedulerConfig, SchedulerError};

const VOCAB: usize = 101;
const BS: usize = 4;
const WINDOW: usize = 8;

fn config(num_blocks: usize, window: Option<usize>) -> SchedulerConfig {
    SchedulerConfig {
        block_size: BS,
        max_num_batched_tokens: 32,
        max_model_len: Some(1024),
        attention_window: window,
        ..SchedulerConfig::new(num_blocks)
    }
}

/// A scheduler (releasing blocks only if `release`) over a mock whose every layer attends over
/// [`WINDOW`] tokens.
fn setup(num_blocks: usize, release: bool) -> (Scheduler, MockExecutor) {
    let s = Scheduler::new(config(num_blocks, release.then_some(WINDOW))).unwrap();
    (
        s,
        MockExecutor::new(num_blocks, BS, VOCAB).with_window(WINDOW),
    )
}

fn req(id: u64, prompt: Vec<u32>, max_tokens: usize, priority: i32) -> Request {
    let mut p = RequestParams::new(max_tokens);
    p.priority = priority;
    Request::new(id, prompt, p)
}

fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (seed * 31 + i * 7) % VOCAB as u32)
        .collect()
}

fn want(prompt: &[u32], max_tokens: usize) -> Vec<u32> {
    reference_generate_windowed(prompt, max_tokens, &[], VOCAB, Some(WINDOW))
}

/// One step; ends stopped requests; checks the pool. Returns the outputs.
fn step(s: &mut Scheduler, ex: &mut MockExecutor) -> Vec<RequestOutput> {
    let out = s.schedule();
    let logits = ex.execute(&out.batch).expect("mock accepts the batch");
    let outs = s.update(&out, &argmax_rows(&logits)).unwrap();
    for o in &outs {
        if let Some(reason) = o.stop {
            assert!(s.finish(o.request_id, reason).is_some());
        }
    }
    s.kv().pool().check_invariants().unwrap();
    outs
}

/// Runs to completion, collecting tokens; calls `each` after every step.
fn drain(
    s: &mut Scheduler,
    ex: &mut MockExecutor,
    mut each: impl FnMut(&Scheduler),
) -> HashMap<u64, Vec<u32>> {
    let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
    for _ in 0..10_000 {
        if !s.has_unfinished() {
            return tokens;
        }
        for o in step(s, ex) {
            tokens.entry(o.request_id).or_default().push(o.token);
        }
        each(s);
    }
    panic!("did not finish");
}

fn assert_no_leak(s: &Scheduler) {
    let kv = s.kv();
    assert_eq!(kv.num_free_blocks(), kv.num_blocks(), "blocks leaked");
    assert!((0..kv.num_blocks() as u32).all(|b| kv.pool().ref_count(b) == 0));
    assert_eq!(kv.num_tables(), 0);
}

/// Most blocks request 1 held after any step of a 20-token prompt and 200 generated tokens.
fn peak_blocks(release: bool) -> (usize, Vec<u32>) {
    let (mut s, mut ex) = setup(64, release);
    let p = prompt(1, 20);
    s.add_request(req(1, p.clone(), 200, 0)).unwrap();
    let mut peak = 0;
    let tokens = drain(&mut s, &mut ex, |s| {
        if let Some(r) = s.request(1) {
            let held = r.block_table().iter().filter(|&&b| b != NO_BLOCK).count();
            assert_eq!(held, r.num_held_blocks());
            peak = peak.max(held);
        }
    });
    assert_eq!(tokens[&1], want(&p, 200));
    assert_no_leak(&s);
    (peak, tokens[&1].clone())
}

#[test]
fn blocks_per_sequence_stay_bounded_by_the_window() {
    let (bounded, with_release) = peak_blocks(true);
    let (unbounded, without_release) = peak_blocks(false);
    let w = AttentionWindow::new(WINDOW, BS).unwrap();
    // After a decode step a sequence holds the window of its next token: ceil(7/4) + 1 blocks.
    assert!(bounded <= w.max_live_blocks(1), "peak {bounded}");
    assert_eq!(bounded, 3);
    // Keeping every block, the table grows with the context: 219 computed tokens.
    assert_eq!(unbounded, 219usize.div_ceil(BS));
    assert_eq!(with_release, without_release);
}

#[test]
fn outputs_match_a_run_that_keeps_every_block() {
    let run = |release: bool| {
        let (mut s, mut ex) = setup(48, release);
        // Requests 2 and 3 share request 1's first 12 tokens (three blocks).
        let shared = prompt(7, 12);
        let prompts = [
            (1, [shared.clone(), prompt(1, 9)].concat()),
            (2, [shared.clone(), prompt(2, 30)].concat()),
            (3, [shared, prompt(3, 3)].concat()),
            (4, prompt(4, 45)),
        ];
        for (id, p) in &prompts {
            s.add_request(req(*id, p.clone(), 40, 0)).unwrap();
        }
        let tokens = drain(&mut s, &mut ex, |_| {});
        for (id, p) in &prompts {
            assert_eq!(tokens[id], want(p, 40), "request {id}, release {release}");
        }
        assert_no_leak(&s);
        (tokens, s.stats())
    };
    let (released, stats) = run(true);
    let (kept, kept_stats) = run(false);
    assert_eq!(released, kept);
    assert!(stats.prefix_cache.hits > 0, "the shared prefix was reused");
    assert!(stats.window_blocks_freed > 0);
    assert_eq!(kept_stats.window_blocks_freed, 0);
}

#[test]
fn nothing_leaks_through_finish_abort_and_preemption() {
    // 7 blocks: three running requests fill them, then a higher-priority one arrives and
    // preempts running requests whose tables have holes; one request is aborted mid-run.
    let (mut s, mut ex) = setup(7, true);
    let mut prompts: Vec<(u64, Vec<u32>)> =
        vec![(1, prompt(1, 22)), (2, prompt(2, 18)), (3, prompt(3, 26))];
    for (id, p) in &prompts {
        s.add_request(req(*id, p.clone(), 60, 0)).unwrap();
    }
    let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut run = |s: &mut Scheduler, ex: &mut MockExecutor, n: usize| {
        for _ in 0..n {
            for o in step(s, ex) {
                tokens.entry(o.request_id).or_default().push(o.token);
            }
        }
    };
    run(&mut s, &mut ex, 12);
    let holed = |s: &Scheduler| -> Vec<u64> {
        let mut ids: Vec<u64> = s
            .running_ids()
            .iter()
            .copied()
            .filter(|&id| {
                s.request(id)
                    .is_some_and(|r| r.block_table()[0] == NO_BLOCK)
            })
            .collect();
        ids.sort_unstable();
        ids
    };
    let before = holed(&s);
    assert!(
        before.len() >= 2,
        "running with released blocks: {before:?}"
    );
    prompts.push((4, prompt(4, 20)));
    s.add_request(req(4, prompts[3].1.clone(), 60, -5)).unwrap();
    run(&mut s, &mut ex, 1);
    let preempted: Vec<u64> = before
        .iter()
        .copied()
        .filter(|&id| s.request(id).is_some_and(|r| r.num_preemptions() > 0))
        .collect();
    assert!(!preempted.is_empty(), "{:?}", s.stats());
    for &id in &preempted {
        assert!(s.request(id).is_some_and(|r| r.block_table().is_empty()));
    }
    s.kv().pool().check_invariants().unwrap();
    run(&mut s, &mut ex, 10);
    let victim = *holed(&s).first().expect("a request with holes still runs");
    assert!(s.abort(victim).is_some());
    for (id, t) in drain(&mut s, &mut ex, |_| {}) {
        tokens.entry(id).or_default().extend(t);
    }
    for (id, p) in &prompts {
        let got = tokens.get(id).cloned().unwrap_or_default();
        if *id == victim {
            assert!(
                want(p, 60).starts_with(&got),
                "request {id} diverged before abort"
            );
        } else {
            assert_eq!(got, want(p, 60), "request {id}");
        }
    }
    assert_no_leak(&s);

    // Abort mid-run, with released blocks, and check the pool again.
    let (mut s, mut ex) = setup(10, true);
    s.add_request(req(1, prompt(5, 30), 60, 0)).unwrap();
    s.add_request(req(2, prompt(6, 12), 60, 0)).unwrap();
    for _ in 0..15 {
        step(&mut s, &mut ex);
    }
    let r1 = s.request(1).expect("still running");
    assert!(
        r1.block_table().starts_with(&[NO_BLOCK]),
        "{:?}",
        r1.block_table()
    );
    assert!(s.abort(1).is_some());
    assert!(s.abort(2).is_some());
    assert_no_leak(&s);
}

#[test]
fn a_sequence_longer_than_the_pool_completes() {
    // 4 blocks of 4 hold 16 tokens; the window of 8 needs at most 3 blocks per decode step.
    let cfg = config(4, Some(WINDOW));
    let mut s = Scheduler::new(cfg).unwrap();
    assert_eq!(
        s.max_model_len(),
        1024,
        "the pool no longer bounds the context"
    );
    let mut ex = MockExecutor::new(4, BS, VOCAB).with_window(WINDOW);
    let p = prompt(9, 40);
    s.add_request(req(1, p.clone(), 100, 0)).unwrap();
    let mut peak = 0;
    let tokens = drain(&mut s, &mut ex, |s| {
        peak = peak.max(s.request(1).map_or(0, Request::num_held_blocks));
    });
    assert_eq!(tokens[&1], want(&p, 100));
    assert_eq!(peak, 3, "blocks held between steps");
    assert_eq!(s.stats().num_preemptions, 0);
    assert_no_leak(&s);

    // Without a window the same prompt is refused: the context is clamped to the pool.
    let mut plain = Scheduler::new(config(4, None)).unwrap();
    assert_eq!(plain.max_model_len(), 16);
    assert!(matches!(
        plain.add_request(req(1, p, 100, 0)),
        Err(SchedulerError::PromptTooLong { .. })
    ));
}

#[test]
fn two_long_sequences_share_a_small_pool() {
    // 8 blocks; each sequence of 60 + 80 tokens would need 35 blocks without the window.
    let (mut s, mut ex) = setup(8, true);
    let (p1, p2) = (prompt(11, 60), prompt(12, 60));
    s.add_request(req(1, p1.clone(), 80, 0)).unwrap();
    s.add_request(req(2, p2.clone(), 80, 0)).unwrap();
    let tokens = drain(&mut s, &mut ex, |_| {});
    assert_eq!(tokens[&1], want(&p1, 80));
    assert_eq!(tokens[&2], want(&p2, 80));
    assert_no_leak(&s);
}

fn manager(num_blocks: usize, window: Option<usize>) -> KvCacheManager {
    KvCacheManager::new(KvCacheConfig {
        num_blocks,
        block_size: BS,
        enable_prefix_caching: true,
        attention_window: window,
    })
    .unwrap()
}

/// Admits `r` with its cached prefix, computes `n` new tokens, registers full blocks and
/// releases what left the window (what the scheduler does over one step).
fn admit(kv: &mut KvCacheManager, r: &mut Request, n: usize) -> ComputedBlocks {
    let hit = kv.get_computed_blocks(r);
    kv.allocate_slots(r, n, &hit).expect("fits");
    r.set_num_computed_tokens(hit.num_tokens + n);
    kv.cache_computed_blocks(r);
    kv.free_outside_window(r);
    hit
}

/// Generates `n` more tokens (any) and computes them, releasing what left the window.
fn advance(kv: &mut KvCacheManager, r: &mut Request, n: usize) -> usize {
    for _ in 0..n {
        r.append_output_token(0);
    }
    kv.allocate_slots(r, n, &ComputedBlocks::default())
        .expect("fits");
    r.set_num_computed_tokens(r.num_computed_tokens() + n);
    kv.cache_computed_blocks(r);
    kv.free_outside_window(r)
}

#[test]
fn shared_prefix_blocks_leaving_the_window_are_only_dereferenced() {
    let mut kv = manager(16, Some(WINDOW));
    let tokens: Vec<u32> = (0..40).collect();
    let mut a = Request::new(1, tokens[..13].to_vec(), RequestParams::new(64));
    admit(&mut kv, &mut a, 13);
    // The pool hands out blocks 0, 1, 2, 3 in order. The next query, at 13, sees 6..=13, so
    // block 0 (positions 0..4) is released but stays cached.
    assert_eq!(a.block_table(), &[NO_BLOCK, 1, 2, 3]);
    assert_eq!(kv.pool().ref_count(0), 0);
    assert!(kv.pool().block_hash(0).is_some());
    // b has the same 13 tokens: it finds blocks 0..3 in the cache, but block 0 is outside its
    // first query's window too, so it is left as a hole and not revived.
    let mut b = Request::new(2, tokens[..13].to_vec(), RequestParams::new(64));
    let hit = admit(&mut kv, &mut b, 1);
    assert_eq!(hit.blocks, vec![0, 1, 2]);
    assert_eq!(b.block_table(), &[NO_BLOCK, 1, 2, 4]);
    assert_eq!(kv.pool().ref_count(0), 0, "not revived by b");
    assert_eq!(kv.pool().ref_count(1), 2);
    // a moves on 8 tokens to 21: the query at 21 sees 14..=21, so blocks 0..3 are out of its
    // window; the shared ones only lose a's reference.
    for _ in 0..8 {
        advance(&mut kv, &mut a, 1);
    }
    assert_eq!(&a.block_table()[..4], &[NO_BLOCK, NO_BLOCK, NO_BLOCK, 3]);
    assert_eq!(kv.pool().ref_count(1), 1);
    assert_eq!(kv.pool().ref_count(2), 1);
    assert_eq!(kv.pool().ref_count(3), 1);
    kv.pool().check_invariants().unwrap();
    kv.free(&mut a);
    kv.free(&mut b);
    assert_eq!(kv.num_free_blocks(), 16);
    assert_eq!(kv.num_tables(), 0);
    kv.pool().check_invariants().unwrap();
}

#[test]
fn released_blocks_serve_later_prefixes_only_while_still_cached() {
    let mut kv = manager(8, Some(WINDOW));
    let tokens: Vec<u32> = (100..140).collect();
    let mut a = Request::new(1, tokens[..24].to_vec(), RequestParams::new(64));
    admit(&mut kv, &mut a, 24);
    let released = kv.window_blocks_freed();
    assert_eq!(
        released, 4,
        "next query at 24 sees 17..=24: blocks 0..4 are out"
    );
    kv.free(&mut a);
    // Still cached: a new request with the same prompt finds all five full blocks (it leaves
    // the last token to compute), though it only takes the ones its window needs.
    let mut b = Request::new(2, tokens[..24].to_vec(), RequestParams::new(64));
    let hit = kv.get_computed_blocks(&mut b);
    assert_eq!(hit.num_tokens, 20);
    kv.free(&mut b);
    // Evict them (allocate the whole pool), and the prefix is gone.
    let mut filler = Request::new(3, (500..532).collect(), RequestParams::new(1));
    kv.allocate_slots(&mut filler, 32, &ComputedBlocks::default())
        .expect("the whole pool is free");
    kv.free(&mut filler);
    let mut c = Request::new(4, tokens[..24].to_vec(), RequestParams::new(64));
    assert_eq!(kv.get_computed_blocks(&mut c).num_tokens, 0);
    assert_eq!(kv.num_free_blocks(), 8);
    kv.pool().check_invariants().unwrap();
}

#[test]
fn zero_window_is_rejected() {
    let cfg = config(4, Some(0));
    assert!(Scheduler::new(cfg).is_err());
}
