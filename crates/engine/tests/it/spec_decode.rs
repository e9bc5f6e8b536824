//! Speculative decoding on the engine core, driven on the test thread: outputs equal plain
//! decoding (greedy and seeded), stops apply inside accepted drafts, blocks are not leaked,
//! the back-off and the `can_speculate` switch hold, and sampled requests keep the target
//! distribution (chi-square test against the exact Markov-chain probabilities).

use crate::engine_common;

use std::sync::Arc;

use engine_common::*;
use kestrel_engine::api::{EngineEvent, EngineRequest};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::core::EngineCore;
use kestrel_engine::executor::{BatchInput, BatchOutput, Executor, ExecutorError, KvGeometry};
use kestrel_engine::mock_executor::{reference_generate, reference_next_token, MockExecutor};
use kestrel_engine::request::{FinishReason, RequestId};
use kestrel_engine::sampling::SamplingParams;
use kestrel_engine::speculative::{
    DraftSeq, NgramProposer, Proposer, SpecCounters, SpecState, SpeculativeConfig, Speculator,
};

/// What one request produced.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    ids: Vec<u32>,
    text: String,
    reason: Option<FinishReason>,
    num_logprobs: usize,
}

fn engine_config(max_num_batched_tokens: usize) -> EngineConfig {
    EngineConfig {
        max_num_seqs: 256,
        max_num_batched_tokens,
        enable_prefix_caching: true,
        max_model_len: 256,
        max_concurrent_requests: None,
        lora: Default::default(),
    }
}

/// Runs `reqs` to completion on a core over `exec` (speculating with `spec` if given); returns
/// each request's outcome, the speculation counts and the free KV blocks at the end.
fn run(
    exec: Box<dyn Executor>,
    spec: Option<Speculator>,
    cfg: &EngineConfig,
    reqs: &[EngineRequest],
) -> (Vec<Outcome>, Option<SpecCounters>, usize) {
    let mut core = EngineCore::new(exec, Arc::new(LetterDecoder), vec![EOS], cfg).unwrap();
    if let Some(s) = spec {
        core = core.with_speculator(s);
    }
    let mut rxs = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        core.add_request(i as RequestId, r.clone(), tx);
        rxs.push(rx);
    }
    let mut steps = 0;
    while core.has_unfinished() {
        core.step();
        steps += 1;
        assert!(steps < 100_000, "the engine does not finish");
    }
    let outcomes = rxs.into_iter().map(drain).collect();
    (outcomes, core.spec_counters(), core.num_free_kv_blocks())
}

fn drain(mut rx: tokio::sync::mpsc::UnboundedReceiver<EngineEvent>) -> Outcome {
    let mut o = Outcome {
        ids: Vec::new(),
        text: String::new(),
        reason: None,
        num_logprobs: 0,
    };
    while let Ok(ev) = rx.try_recv() {
        match ev {
            EngineEvent::Token(t) => {
                o.ids.push(t.id);
                o.text.push_str(&t.text);
                o.num_logprobs += usize::from(t.logprobs.is_some());
            }
            EngineEvent::Finished { reason, text, .. } => {
                o.text.push_str(&text);
                o.reason = Some(reason);
            }
            EngineEvent::Failed(f) => panic!("request failed: {f:?}"),
        }
    }
    o
}

/// Proposes the mock model's true continuation with one wrong token at position
/// `wrong(call, k)` (`k` or more: none wrong).
struct OracleProposer {
    calls: usize,
    wrong: fn(usize, usize) -> usize,
}

impl OracleProposer {
    /// The wrong position cycles through `0..=k` over the calls, so every acceptance length
    /// occurs.
    fn new() -> Self {
        OracleProposer::wrong_at(|call, k| call % (k + 1))
    }

    fn wrong_at(wrong: fn(usize, usize) -> usize) -> Self {
        OracleProposer { calls: 0, wrong }
    }
}

impl Proposer for OracleProposer {
    fn lookahead(&mut self, state: &mut SpecState, tokens: &[u32], k: usize) -> usize {
        let mut ctx = tokens.to_vec();
        let wrong = (self.wrong)(self.calls, k);
        self.calls += 1;
        let mut draft = Vec::new();
        for i in 0..k {
            let mut t = reference_next_token(&ctx, VOCAB);
            if i == wrong {
                t = (t + 1) % VOCAB as u32;
            }
            ctx.push(t);
            draft.push(t);
        }
        state.stash_draft(&draft);
        k
    }

    fn propose(
        &mut self,
        seqs: &mut [DraftSeq<'_>],
        drafts: &mut Vec<Vec<u32>>,
    ) -> Result<(), ExecutorError> {
        drafts.clear();
        drafts.extend(seqs.iter_mut().map(DraftSeq::take_stashed_draft));
        Ok(())
    }
}

fn oracle(k: usize) -> Speculator {
    Speculator::new(
        SpeculativeConfig {
            num_speculative_tokens: k,
            max_batch_tokens: usize::MAX,
            adaptive_length: false,
        },
        Box::new(OracleProposer::new()),
    )
}

fn mock(num_blocks: usize) -> Box<dyn Executor> {
    Box::new(MockExecutor::new(num_blocks, BLOCK, VOCAB))
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> EngineRequest {
    request(prompt, max_tokens).build()
}

#[test]
fn oracle_drafts_give_the_plain_greedy_output_and_free_every_block() {
    let cfg = engine_config(64);
    let reqs: Vec<_> = (0..6)
        .map(|i| greedy(prompt(i, 5 + 3 * i as usize), 25))
        .collect();
    let (plain, _, _) = run(mock(128), None, &cfg, &reqs);
    let (spec, counts, free) = run(mock(128), Some(oracle(4)), &cfg, &reqs);
    assert_eq!(spec, plain);
    for (i, o) in plain.iter().enumerate() {
        let want = reference_generate(&prompt(i as u32, 5 + 3 * i), 25, &[EOS], VOCAB);
        assert_eq!(o.ids, want, "request {i}");
    }
    let c = counts.unwrap();
    assert!(c.num_drafts > 10, "{c:?}");
    assert!(
        c.num_accepted_tokens > 0 && c.num_accepted_tokens < c.num_draft_tokens,
        "{c:?}"
    );
    assert_eq!(c.num_emitted_tokens, c.num_accepted_tokens + c.num_drafts);
    assert_eq!(free, 128, "every KV block is free after the run");
}

#[test]
fn adaptive_draft_lengths_shrink_after_rejections_and_keep_the_output() {
    let cfg = engine_config(64);
    let reqs: Vec<_> = (0..3).map(|i| greedy(prompt(20 + i, 6), 40)).collect();
    let (plain, _, _) = run(mock(128), None, &cfg, &reqs);
    let speculate = |adaptive_length, wrong| {
        let config = SpeculativeConfig {
            num_speculative_tokens: 6,
            max_batch_tokens: usize::MAX,
            adaptive_length,
        };
        let (out, counts, free) = run(
            mock(128),
            Some(Speculator::new(
                config,
                Box::new(OracleProposer::wrong_at(wrong)),
            )),
            &cfg,
            &reqs,
        );
        assert_eq!(out, plain, "adaptive {adaptive_length}");
        assert_eq!(free, 128);
        counts.unwrap()
    };
    // Every draft wrong at its first token.
    let (fixed, adaptive) = (speculate(false, |_, _| 0), speculate(true, |_, _| 0));
    assert_eq!(fixed.num_accepted_tokens + adaptive.num_accepted_tokens, 0);
    assert!(
        fixed.num_draft_tokens > 5 * fixed.num_drafts,
        "fixed lengths verify up to 6 drafts every step: {fixed:?}"
    );
    assert_eq!(
        adaptive.num_draft_tokens,
        adaptive.num_drafts + 3 * 5,
        "each request's first draft has 6 tokens, every later one 1: {adaptive:?}"
    );
    // Every draft right: adaptive lengths never shorten.
    let (fixed, adaptive) = (speculate(false, |_, k| k), speculate(true, |_, k| k));
    assert_eq!(adaptive, fixed);
    assert_eq!(fixed.num_accepted_tokens, fixed.num_draft_tokens);
}

#[test]
fn speculation_state_dies_with_its_request_even_when_the_id_is_reused() {
    // Every draft wrong at its first token: an adaptive request drafts 6 tokens once, then 1.
    // A request that reuses a finished request's id starts from the full length again, because
    // the draft length lives in the request, not in a map keyed by id.
    let cfg = engine_config(64);
    let mut core = EngineCore::new(mock(128), Arc::new(LetterDecoder), vec![EOS], &cfg).unwrap();
    core = core.with_speculator(Speculator::new(
        SpeculativeConfig {
            num_speculative_tokens: 6,
            max_batch_tokens: usize::MAX,
            adaptive_length: true,
        },
        Box::new(OracleProposer::wrong_at(|_, _| 0)),
    ));
    let mut outcomes = Vec::new();
    for round in 0..3 {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        core.add_request(0, greedy(prompt(30 + round, 6), 20), tx);
        while core.has_unfinished() {
            core.step();
        }
        outcomes.push(drain(rx));
    }
    let counts = core.spec_counters().unwrap();
    assert_eq!(
        counts.num_draft_tokens,
        counts.num_drafts + 3 * 5,
        "each request's first draft has 6 tokens, every later one 1: {counts:?}"
    );
    let reqs: Vec<_> = (0..3).map(|i| greedy(prompt(30 + i, 6), 20)).collect();
    let (plain, _, _) = run(mock(128), None, &cfg, &reqs);
    assert_eq!(outcomes, plain);
    assert_eq!(core.num_free_kv_blocks(), 128);
}

#[test]
fn speculation_survives_a_small_budget_and_preemption() {
    // 3 tokens a step: lookahead slots are cut by the budget; 14 blocks of 4 for 5 requests
    // of up to 40 tokens: requests are preempted and recomputed.
    for (budget, blocks) in [(3, 64), (64, 14)] {
        let cfg = engine_config(budget);
        let reqs: Vec<_> = (0..5).map(|i| greedy(prompt(10 + i, 9), 30)).collect();
        let (plain, _, _) = run(mock(blocks), None, &cfg, &reqs);
        let (spec, counts, free) = run(mock(blocks), Some(oracle(3)), &cfg, &reqs);
        assert_eq!(spec, plain, "budget {budget}, {blocks} blocks");
        assert!(counts.unwrap().num_accepted_tokens > 0);
        assert_eq!(free, blocks);
    }
}

#[test]
fn stop_tokens_and_stop_strings_inside_accepted_drafts_end_there() {
    let cfg = engine_config(64);
    let p = prompt(3, 7);
    let full = reference_generate(&p, 30, &[], VOCAB);
    let stop_id = full[6];
    let stop_at = full.iter().position(|&t| t == stop_id).unwrap();
    let mut by_id = request(p.clone(), 30);
    by_id.sampling.stop_token_ids = vec![stop_id];
    by_id.sampling.ignore_eos = true;
    let mut by_text = request(p.clone(), 30);
    by_text.sampling.stop = vec![text_of(&full[9..11])];
    by_text.sampling.ignore_eos = true;
    let mut by_len = request(p, 13);
    by_len.sampling.ignore_eos = true;
    let reqs = vec![by_id.build(), by_text.build(), by_len.build()];
    let (plain, _, _) = run(mock(64), None, &cfg, &reqs);
    let (spec, counts, free) = run(mock(64), Some(oracle(5)), &cfg, &reqs);
    assert_eq!(spec, plain);
    assert_eq!(plain[0].ids, &full[..=stop_at]);
    assert_eq!(plain[0].reason, Some(FinishReason::Stop));
    assert_eq!(plain[1].reason, Some(FinishReason::Stop));
    assert_eq!(plain[2].ids, &full[..13]);
    assert_eq!(plain[2].reason, Some(FinishReason::Length));
    assert!(counts.unwrap().num_accepted_tokens > 0);
    assert_eq!(free, 64);
}

#[test]
fn ngram_drafts_on_the_mock_keep_the_greedy_output() {
    let cfg = engine_config(64);
    // Repetitive prompts so that suffixes recur and drafts are proposed (most are rejected:
    // the mock's tokens are hashes).
    let reqs: Vec<_> = (0..4)
        .map(|i| {
            let unit = prompt(i, 3);
            greedy(unit.repeat(4), 20)
        })
        .collect();
    let (plain, _, _) = run(mock(64), None, &cfg, &reqs);
    let spec = Speculator::new(
        SpeculativeConfig::new(4),
        Box::new(NgramProposer::new(1, 3)),
    );
    let (out, counts, free) = run(mock(64), Some(spec), &cfg, &reqs);
    assert_eq!(out, plain);
    assert!(counts.unwrap().num_drafts > 0);
    assert_eq!(free, 64);
}

#[test]
fn aborted_speculating_requests_free_their_blocks() {
    let cfg = engine_config(64);
    let mut core = EngineCore::new(mock(64), Arc::new(LetterDecoder), vec![EOS], &cfg).unwrap();
    core = core.with_speculator(oracle(4));
    let mut rxs = Vec::new();
    for i in 0..4 {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut r = request(prompt(i, 6), 40);
        r.sampling.ignore_eos = true;
        core.add_request(i as RequestId, r.build(), tx);
        rxs.push(rx);
    }
    for _ in 0..4 {
        core.step();
    }
    assert!(core.spec_counters().unwrap().num_drafts > 0);
    assert!(core.num_free_kv_blocks() < 64);
    for i in 0..4 {
        assert!(core.abort(i));
    }
    assert!(!core.has_unfinished());
    assert_eq!(core.num_free_kv_blocks(), 64);
}

#[test]
fn speculation_backs_off_when_the_batch_is_big_and_skips_logprobs_requests() {
    let cfg = engine_config(64);
    let reqs: Vec<_> = (0..3).map(|i| greedy(prompt(i, 6), 12)).collect();
    let (plain, _, _) = run(mock(64), None, &cfg, &reqs);
    // 3 running × (4 + 1) = 15 > 14: no request speculates while all three run.
    let limited = |max_batch_tokens| {
        Speculator::new(
            SpeculativeConfig {
                num_speculative_tokens: 4,
                max_batch_tokens,
                adaptive_length: false,
            },
            Box::new(OracleProposer::new()),
        )
    };
    let (out, counts, _) = run(mock(64), Some(limited(4)), &cfg, &reqs[..1]);
    assert_eq!(out[..], plain[..1]);
    assert_eq!(
        counts.unwrap().num_drafts,
        0,
        "1 × 5 > 4 tokens: never speculates"
    );
    let (out, counts, _) = run(mock(64), Some(limited(15)), &cfg, &reqs);
    assert_eq!(out, plain);
    assert!(
        counts.unwrap().num_drafts > 0,
        "3 × 5 <= 15 tokens: speculates"
    );

    // A request with logprobs decodes normally beside one that speculates.
    let mut with_lp = request(prompt(7, 6), 12);
    with_lp.sampling.logprobs = Some(2);
    let mixed = vec![with_lp.build(), greedy(prompt(8, 6), 12)];
    let (plain, _, _) = run(mock(64), None, &cfg, &mixed);
    let (out, counts, _) = run(mock(64), Some(oracle(4)), &cfg, &mixed);
    assert_eq!(out, plain);
    assert_eq!(out[0].num_logprobs, out[0].ids.len());
    assert!(counts.unwrap().num_drafts > 0);
    let (alone, counts, _) = run(mock(64), Some(oracle(4)), &cfg, &mixed[..1]);
    assert_eq!(alone[..], plain[..1]);
    assert_eq!(
        counts.unwrap().num_drafts,
        0,
        "a logprobs request never speculates"
    );
}

// ---- The target distribution is kept -------------------------------------------------------

const V: usize = 5;

/// `P(next = j | last = t)`: mass 6 on `t + 1`, 1..3 elsewhere, normalised.
fn transition(t: usize, j: usize) -> f64 {
    let w = |j: usize| {
        if j == (t + 1) % V {
            6.0
        } else {
            1.0 + ((t * 3 + j) % 3) as f64
        }
    };
    w(j) / (0..V).map(w).sum::<f64>()
}

/// A Markov-chain "model": the logits row after token `t` is `ln P(. | t)`. It keeps no KV.
struct MarkovExecutor;

impl Executor for MarkovExecutor {
    fn execute(&mut self, input: &BatchInput) -> Result<BatchOutput, ExecutorError> {
        let mut logits = Vec::new();
        for s in &input.seqs {
            for &t in &s.tokens[s.tokens.len() - s.num_logits..] {
                logits.extend((0..V).map(|j| transition(t as usize, j).ln() as f32));
            }
        }
        Ok(BatchOutput { vocab: V, logits })
    }

    fn vocab_size(&self) -> usize {
        V
    }

    fn kv_geometry(&self) -> KvGeometry {
        KvGeometry {
            block_size: BLOCK,
            num_blocks: 8192,
            attention_window: None,
        }
    }
}

fn sampled_requests(n: u64) -> Vec<EngineRequest> {
    let limits = kestrel_engine::api::RequestLimits {
        vocab_size: V,
        max_model_len: usize::MAX,
    };
    // The prompt ends in [0, 1, 2], seen before: n-gram drafts [3, 4, 0, 1].
    let p: Vec<u32> = (0..13).map(|i| i % V as u32).collect();
    (0..n)
        .map(|seed| {
            let sampling = SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                max_tokens: 6,
                ignore_eos: true,
                ..SamplingParams::default()
            };
            EngineRequest::new(p.clone(), sampling, &limits).unwrap()
        })
        .collect()
}

/// Chi-square statistic of `counts` against `probs` over `n` draws.
fn chi_square(counts: &[u64], probs: &[f64], n: u64) -> f64 {
    counts
        .iter()
        .zip(probs)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn sampled_requests_keep_the_target_distribution() {
    let n = 4000;
    let reqs = sampled_requests(n);
    let cfg = EngineConfig {
        max_model_len: 64,
        ..engine_config(4096)
    };
    let spec = Speculator::new(
        SpeculativeConfig {
            num_speculative_tokens: 4,
            max_batch_tokens: usize::MAX,
            adaptive_length: false,
        },
        Box::new(NgramProposer::new(1, 3)),
    );
    let (out, counts, _) = run(Box::new(MarkovExecutor), Some(spec), &cfg, &reqs);
    let c = counts.unwrap();
    assert!(c.num_accepted_tokens > 1000, "{c:?}");
    assert!(c.num_accepted_tokens < c.num_draft_tokens, "{c:?}");

    // The joint law of (t2, t3) — the first tokens that come out of verification — and of
    // (t5, t6), against the exact chain from the prompt's last token 2. With 24 degrees of
    // freedom, P(chi2 > 51.18) = 0.001 under the null.
    for k in [2, 5] {
        let probs = joint_law(k);
        let mut hist = vec![0u64; V * V];
        for o in &out {
            assert_eq!(o.ids.len(), 6);
            hist[o.ids[k - 1] as usize * V + o.ids[k] as usize] += 1;
        }
        let chi2 = chi_square(&hist, &probs, n);
        assert!(
            chi2 < 51.18,
            "tokens {k},{}: chi2 {chi2:.1} (hist {hist:?})",
            k + 1
        );
    }

    // Seeded requests draw once per emitted token: exactly the plain outputs.
    let (plain, _, _) = run(Box::new(MarkovExecutor), None, &cfg, &reqs);
    assert_eq!(out, plain);
}

/// The exact law of `(t_k, t_{k+1})` (tokens counted from 1) after a prompt ending in 2, as a
/// `V × V` table.
fn joint_law(k: usize) -> Vec<f64> {
    let mut law: Vec<f64> = (0..V).map(|a| transition(2, a)).collect();
    for _ in 1..k {
        law = (0..V)
            .map(|b| (0..V).map(|a| law[a] * transition(a, b)).sum())
            .collect();
    }
    (0..V * V)
        .map(|ij| law[ij / V] * transition(ij / V, ij % V))
        .collect()
}
