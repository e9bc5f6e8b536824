//! Prompt logprobs (`EngineHandle::prompt_logprobs`) on the tiny random-weight HF Llama
//! (tests/fixtures/tiny-llama-f32), checked two ways:
//!
//! * against a log-softmax computed here in f64 from the runner's all-positions logits (a
//!   separate code path, `execute_all_logits`, itself checked against transformers in
//!   golden_tiny_llama.rs): every token's logprob within `LOGPROB_TOL`;
//! * against transformers directly: the differences between the logprobs of the reference's
//!   top tokens equal the differences of transformers' logits within `2 * TINY_LOGIT_TOL`,
//!   and the reported top tokens are the reference's wherever its margins allow.
//!
//! The engine scores in chunks of its step budget (32 tokens here), so the 107-token prompt
//! crosses three chunk boundaries; afterwards every KV block is free.

use crate::common;

use std::sync::Arc;

use common::*;
use kestrel_engine::config::EngineConfig;
use kestrel_engine::handle::EngineHandle;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::ModelRunner;

const LOGPROB_TOL: f64 = 1e-4;
const TOP_N: usize = 5;

/// `ln softmax(row)[token]` in f64.
fn log_softmax_at(row: &[f32], token: u32) -> f64 {
    let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let sum: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
    row[token as usize] as f64 - max - sum.ln()
}

fn engine() -> EngineHandle {
    let loaded = load(&fixtures().join("tiny-llama-f32"));
    let tokenizer = Arc::new(loaded.tokenizer);
    let runner = ModelRunner::new(loaded.model, 16, 8, ThreadPool::global());
    let config = EngineConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 32,
        enable_prefix_caching: true,
        max_model_len: 128,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    let eos = tokenizer.eos_ids().to_vec();
    EngineHandle::start(Box::new(runner), tokenizer, eos, config)
}

#[test]
fn prompt_logprobs_match_the_log_softmax_of_every_position() {
    let golden = read_golden("tiny-llama-f32.json");
    let mut reference = runner(load(&fixtures().join("tiny-llama-f32")), 128);
    let engine = engine();
    for p in &golden.prompts {
        let ids = &p.teacher_forced.ids;
        let (logits, vocab) = teacher_forced_logits(&mut reference, ids);
        let scores = engine
            .prompt_logprobs(ids.clone(), TOP_N, None)
            .expect("scores");
        assert_eq!(scores.len(), ids.len(), "{}: one entry per token", p.name);
        assert!(
            scores[0].is_none(),
            "{}: the first token has no context",
            p.name
        );
        let mut worst = 0.0f64;
        for pos in 1..ids.len() {
            let scored = scores[pos].as_ref().expect("scored");
            let s = &scored.logprobs;
            let row = &logits[(pos - 1) * vocab..pos * vocab];
            let above = row.iter().filter(|&&l| l > row[ids[pos] as usize]).count();
            assert_eq!(scored.rank, above + 1, "{}@{pos}: rank", p.name);
            assert_eq!(s.chosen.token, ids[pos]);
            let want = log_softmax_at(row, ids[pos]);
            worst = worst.max((s.chosen.logprob as f64 - want).abs());
            assert_eq!(s.top.len(), TOP_N);
            for t in &s.top {
                let want = log_softmax_at(row, t.token);
                assert!(
                    (t.logprob as f64 - want).abs() <= LOGPROB_TOL,
                    "{}@{pos}",
                    p.name
                );
            }
        }
        eprintln!("{}: max |logprob - reference| = {worst:e}", p.name);
        assert!(worst <= LOGPROB_TOL, "{}: {worst}", p.name);
    }
    assert_eq!(engine.stats().kv_usage, 0.0, "scoring must free its blocks");
    engine.shutdown(std::time::Duration::from_secs(1));
}

#[test]
fn prompt_logprobs_agree_with_transformers_top_tokens() {
    let golden = read_golden("tiny-llama-f32.json");
    let engine = engine();
    for p in &golden.prompts {
        let tf = &p.teacher_forced;
        let scores = engine
            .prompt_logprobs(tf.ids.clone(), TOP_N, None)
            .expect("scores");
        // Row `r` of the reference predicts token `r + 1`, which is scores[r + 1].
        for r in 0..tf.ids.len() - 1 {
            let s = &scores[r + 1].as_ref().expect("scored").logprobs;
            let (ref_ids, ref_logits) = (&tf.topk_ids[r], &tf.topk_logits[r]);
            if tf.margin[r] > TINY_MARGIN {
                assert_eq!(s.top[0].token, ref_ids[0], "{}@{r}: top token", p.name);
            }
            // Log-softmax keeps logit differences: compare the top token's lead over the
            // others Kestrel reports that transformers ranked too.
            let lead_ref = |id: u32| {
                ref_ids
                    .iter()
                    .position(|&x| x == id)
                    .map(|i| ref_logits[0] - ref_logits[i])
            };
            let top_lp = s
                .top
                .iter()
                .find(|t| t.token == ref_ids[0])
                .map(|t| t.logprob);
            let Some(top_lp) = top_lp else {
                assert!(
                    tf.margin[r] <= TINY_MARGIN,
                    "{}@{r}: reference top missing",
                    p.name
                );
                continue;
            };
            for t in &s.top {
                if let Some(want) = lead_ref(t.token) {
                    let got = top_lp - t.logprob;
                    assert!(
                        (got - want).abs() <= 2.0 * TINY_LOGIT_TOL,
                        "{}@{r}: lead over {} is {got}, transformers {want}",
                        p.name,
                        t.token
                    );
                }
            }
        }
    }
    engine.shutdown(std::time::Duration::from_secs(1));
}

#[test]
fn prompt_logprobs_refuse_bad_input() {
    let engine = engine();
    assert!(engine.prompt_logprobs(Vec::new(), 1, None).is_err());
    assert!(
        engine.prompt_logprobs(vec![1; 129], 1, None).is_err(),
        "longer than the context"
    );
    assert!(engine.prompt_logprobs(vec![u32::MAX, 1], 1, None).is_err());
    let one = engine
        .prompt_logprobs(vec![1], 1, None)
        .expect("a single token scores");
    assert_eq!(one, vec![None]);
    assert_eq!(engine.stats().kv_usage, 0.0);
    engine.shutdown(std::time::Duration::from_secs(1));
}
