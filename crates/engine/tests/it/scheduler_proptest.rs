//! Randomized submit / step / abort sequences over random configurations: no block leaks, pool
//! invariants hold after every step, the mock accepts every batch, the engine never stalls,
//! every non-aborted request finishes with exactly the unbatched reference output. Half the
//! configurations model a sliding window on every layer: then blocks are released out of the
//! window as requests run, no sequence ever holds more than the window bound, and the outputs
//! are the windowed reference's.

use std::collections::{HashMap, HashSet};

use kestrel_engine::executor::Executor;
use kestrel_engine::kv::NO_BLOCK;
use kestrel_engine::mock_executor::{argmax_rows, reference_generate_windowed, MockExecutor};
use kestrel_engine::request::{FinishReason, Request, RequestParams};
use kestrel_engine::scheduler::{Scheduler, SchedulerConfig, SchedulerError};
use proptest::prelude::*;

const VOCAB: usize = 40;
const PREFIX_LENS: [usize; 4] = [0, 4, 9, 16];

#[derive(Debug, Clone)]
enum Op {
    Submit {
        prefix: usize,
        suffix: Vec<u32>,
        max_tokens: usize,
        priority: i32,
    },
    Step,
    Abort(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let submit = (
        0..PREFIX_LENS.len(),
        prop::collection::vec(0..VOCAB as u32, 1..12),
        1..14usize,
        -1..2i32,
    )
        .prop_map(|(prefix, suffix, max_tokens, priority)| Op::Submit {
            prefix,
            suffix,
            max_tokens,
            priority,
        });
    prop_oneof![3 => submit, 5 => Just(Op::Step), 1 => any::<usize>().prop_map(Op::Abort)]
}

fn config() -> impl Strategy<Value = (SchedulerConfig, u32)> {
    (
        2..24usize,
        1..7usize,
        2..40usize,
        1..6usize,
        any::<bool>(),
        any::<bool>(),
        prop::option::of(1..10usize),
        0..VOCAB as u32,
        prop::option::of(1..20usize),
    )
        .prop_map(
            |(num_blocks, block_size, budget, seqs, chunked, caching, threshold, eos, window)| {
                let cfg = SchedulerConfig {
                    max_num_seqs: seqs,
                    max_num_batched_tokens: budget,
                    block_size,
                    num_kv_blocks: num_blocks,
                    enable_prefix_caching: caching,
                    enable_chunked_prefill: chunked,
                    long_prefill_threshold: threshold,
                    max_model_len: None,
                    attention_window: window,
                    max_loras: None,
                    max_preemptions: Some(2),
                    contended_prefill_chunk: threshold.map(|t| t + 1),
                };
                (cfg, eos)
            },
        )
}

/// Test-side bookkeeping of one run.
struct Harness {
    s: Scheduler,
    ex: MockExecutor,
    eos: u32,
    prompts: Vec<(u64, Vec<u32>, usize)>,
    aborted: HashSet<u64>,
    rejected: HashSet<u64>,
    produced: HashMap<u64, Vec<u32>>,
    finished: HashMap<u64, FinishReason>,
    empty_streak: usize,
    chunks: usize,
}

impl Harness {
    fn submit(
        &mut self,
        prefix: usize,
        suffix: Vec<u32>,
        max_tokens: usize,
        priority: i32,
    ) -> Result<(), TestCaseError> {
        let id = (self.prompts.len() + self.rejected.len()) as u64;
        let prompt: Vec<u32> = (0..PREFIX_LENS[prefix] as u32)
            .map(|t| (t * 7 + 3) % VOCAB as u32)
            .chain(suffix)
            .collect();
        let mut p = RequestParams::new(max_tokens);
        p.priority = priority;
        p.eos_token_ids = vec![self.eos];
        match self.s.add_request(Request::new(id, prompt.clone(), p)) {
            Ok(()) => self.prompts.push((id, prompt, max_tokens)),
            Err(SchedulerError::PromptTooLong { len, .. }) => {
                prop_assert!(len >= self.s.max_model_len());
                self.rejected.insert(id);
            }
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), TestCaseError> {
        let out = self.s.schedule();
        if out.is_empty() && self.s.has_unfinished() {
            self.empty_streak += 1;
            prop_assert!(self.empty_streak <= 1, "two empty steps in a row: stalled");
        } else {
            self.empty_streak = 0;
        }
        let batch = &out.batch;
        self.chunks += batch.seqs.iter().filter(|q| q.num_logits == 0).count();
        if let Some(w) = self.s.kv().attention_window() {
            for q in &batch.seqs {
                let held = q.block_table.iter().filter(|&&b| b != NO_BLOCK).count();
                prop_assert!(
                    held <= w.max_live_blocks(q.tokens.len()),
                    "sequence holds {} blocks for a chunk of {}",
                    held,
                    q.tokens.len()
                );
            }
        }
        prop_assert!(batch.num_tokens() <= self.s.config().max_num_batched_tokens);
        prop_assert!(batch.seqs.len() <= self.s.config().max_num_seqs);
        let logits = self
            .ex
            .execute(batch)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let outs = self
            .s
            .update(&out, &argmax_rows(&logits))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.s
            .kv()
            .pool()
            .check_invariants()
            .map_err(TestCaseError::fail)?;
        for o in outs {
            prop_assert!(
                !self.finished.contains_key(&o.request_id),
                "output after finish"
            );
            self.produced.entry(o.request_id).or_default().push(o.token);
            if let Some(r) = o.stop {
                self.finished.insert(o.request_id, r);
                prop_assert!(self.s.finish(o.request_id, r).is_some());
            }
        }
        Ok(())
    }

    fn check_final(&self) -> Result<(), TestCaseError> {
        let kv = self.s.kv();
        prop_assert_eq!(kv.num_free_blocks(), kv.num_blocks());
        prop_assert!((0..kv.num_blocks() as u32).all(|b| kv.pool().ref_count(b) == 0));
        prop_assert_eq!(kv.usage(), 0.0);
        prop_assert_eq!(kv.num_tables(), 0);
        prop_assert!(self
            .rejected
            .iter()
            .all(|id| !self.produced.contains_key(id)));
        let max_len = self.s.max_model_len();
        for (id, prompt, max_tokens) in &self.prompts {
            let limit = (*max_tokens).min(max_len.saturating_sub(prompt.len()));
            let window = self.s.config().attention_window;
            let want = reference_generate_windowed(prompt, limit, &[self.eos], VOCAB, window);
            let got = self.produced.get(id).cloned().unwrap_or_default();
            if self.aborted.contains(id) {
                prop_assert!(
                    want.starts_with(&got),
                    "request {} diverged before abort",
                    id
                );
                continue;
            }
            prop_assert_eq!(&got, &want, "request {}", id);
            let reason = if want.last() == Some(&self.eos) {
                FinishReason::Stop
            } else {
                FinishReason::Length
            };
            prop_assert_eq!(self.finished.get(id), Some(&reason), "request {}", id);
        }
        Ok(())
    }
}

/// What a run exercised: preemptions, prefix-cache hit tokens, aborts, steps with a partial
/// (non-sampling) prefill chunk.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    preemptions: u64,
    hits: u64,
    aborts: usize,
    chunks: usize,
    window_freed: u64,
}

fn run(cfg: SchedulerConfig, eos: u32, ops: Vec<Op>) -> Result<Coverage, TestCaseError> {
    let mut h = Harness {
        s: Scheduler::new(cfg).map_err(|e| TestCaseError::fail(e.to_string()))?,
        ex: match cfg.attention_window {
            Some(w) => MockExecutor::new(cfg.num_kv_blocks, cfg.block_size, VOCAB).with_window(w),
            None => MockExecutor::new(cfg.num_kv_blocks, cfg.block_size, VOCAB),
        },
        eos,
        prompts: Vec::new(),
        aborted: HashSet::new(),
        rejected: HashSet::new(),
        produced: HashMap::new(),
        finished: HashMap::new(),
        empty_streak: 0,
        chunks: 0,
    };
    for op in ops {
        match op {
            Op::Submit {
                prefix,
                suffix,
                max_tokens,
                priority,
            } => h.submit(prefix, suffix, max_tokens, priority)?,
            Op::Step => h.step()?,
            Op::Abort(i) if !h.prompts.is_empty() => {
                let id = h.prompts[i % h.prompts.len()].0;
                if h.s.abort(id).is_some() {
                    h.aborted.insert(id);
                }
            }
            Op::Abort(_) => {}
        }
    }
    let mut steps = 0;
    while h.s.has_unfinished() {
        h.step()?;
        steps += 1;
        prop_assert!(steps < 20_000, "requests never finished");
    }
    h.check_final()?;
    let stats = h.s.stats();
    Ok(Coverage {
        preemptions: stats.num_preemptions,
        hits: stats.prefix_cache.hits,
        aborts: h.aborted.len(),
        chunks: h.chunks,
        window_freed: stats.window_blocks_freed,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_traffic_leaks_nothing_and_finishes_everything(
        (cfg, eos) in config(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(cfg, eos, ops)?;
    }
}

/// Guards the random test against silently exercising nothing: over 300 cases, preemption,
/// prefix hits, aborts, chunked prefill and window releases all happen.
#[test]
fn random_traffic_covers_preemption_caching_abort_and_chunking() {
    use proptest::test_runner::{Config, TestRunner};
    use std::cell::Cell;
    let total = Cell::new(Coverage::default());
    let mut runner = TestRunner::new(Config {
        cases: 300,
        ..Config::default()
    });
    let strategy = (config(), prop::collection::vec(op(), 1..60));
    runner
        .run(&strategy, |((cfg, eos), ops)| {
            let c = run(cfg, eos, ops)?;
            let t = total.get();
            total.set(Coverage {
                preemptions: t.preemptions + c.preemptions,
                hits: t.hits + c.hits,
                aborts: t.aborts + c.aborts,
                chunks: t.chunks + c.chunks,
                window_freed: t.window_freed + c.window_freed,
            });
            Ok(())
        })
        .unwrap();
    let t = total.get();
    assert!(
        t.preemptions > 0 && t.hits > 0 && t.aborts > 0 && t.chunks > 0 && t.window_freed > 0,
        "{t:?}"
    );
    eprintln!("coverage over 300 cases: {t:?}");
}
