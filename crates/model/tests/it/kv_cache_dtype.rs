//! The tiny f32 Llama fixture run with each KV cache dtype: logits with f16 and q8 KV must stay
//! within a stated tolerance of the logits with f32 KV (same weights, same prompts), both in
//! one teacher-forced prefill and in prefill + token-by-token decode across several blocks.
//!
//! Tolerances (absolute, on logits whose top values are ~5–7): f16 stores K/V with a relative
//! error ≤ 2^-11, q8 with ≤ max|row| / 254 per element. This random-weight model amplifies KV
//! error about 20x into its logits: measured max |Δlogit| over the five golden prompts is
//! 0.5–1.2e-2 for f16 and 0.12–0.34 for q8, so the tolerances leave ~2.5x / ~1.8x headroom, and
//! the argmax must agree wherever the f32 top-1/top-2 margin exceeds 4x the tolerance.

use crate::common;

use common::*;
use kestrel_engine::executor::{BatchInput, SeqBatch};
use kestrel_kernels::cpu::attention::KvDtype;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::runner::KvSpec;
use kestrel_model::ModelRunner;

const F16_TOL: f32 = 3e-2;
const Q8_TOL: f32 = 0.6;

fn runner(dtype: KvDtype, tokens: usize) -> ModelRunner {
    let loaded = load(&fixtures().join("tiny-llama-f32"));
    let kv = KvSpec {
        block_size: 16,
        num_blocks: tokens.div_ceil(16),
        dtype,
    };
    ModelRunner::with_kv(loaded.model, kv, ThreadPool::global())
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// `ids` prefilled in one pass up to `split`, then one token per step; every position's logits.
fn prefill_then_decode(runner: &mut ModelRunner, ids: &[u32], split: usize) -> Vec<f32> {
    let table: Vec<u32> = (0..ids.len().div_ceil(16) as u32).collect();
    let step = |runner: &mut ModelRunner, start: usize, end: usize| {
        let seqs = vec![SeqBatch {
            request_id: 0,
            tokens: ids[start..end].to_vec(),
            start_pos: start,
            block_table: table.clone(),
            num_logits: 1,
            adapter: None,
        }];
        runner
            .execute_all_logits(&BatchInput { seqs })
            .expect("forward pass runs")
            .logits
    };
    let mut logits = step(runner, 0, split);
    for pos in split..ids.len() {
        logits.extend(step(runner, pos, pos + 1));
    }
    logits
}

#[test]
fn kv_dtypes_keep_logits_close_to_f32_kv() {
    let golden = read_golden("tiny-llama-f32.json");
    let longest = golden
        .prompts
        .iter()
        .map(|p| p.teacher_forced.ids.len())
        .max()
        .expect("prompts");
    let mut base = runner(KvDtype::F32, longest);
    for (dtype, tol) in [(KvDtype::F16, F16_TOL), (KvDtype::Q8, Q8_TOL)] {
        let mut r = runner(dtype, longest);
        assert_eq!(r.kv_shape().dtype, dtype);
        for p in &golden.prompts {
            let ids = &p.teacher_forced.ids;
            let (want, vocab) = teacher_forced_logits(&mut base, ids);
            let (got, _) = teacher_forced_logits(&mut r, ids);
            let err = max_abs_diff(&got, &want);
            eprintln!("{dtype} KV, {}: max |Δlogit| = {err:.2e}", p.name);
            assert!(
                err <= tol,
                "{dtype} KV, {}: logits differ from f32 KV by {err} (> {tol})",
                p.name
            );
            assert!(
                err > 0.0,
                "{dtype} KV, {}: logits identical to f32 KV; is the cache really {dtype}?",
                p.name
            );
            for row in 0..ids.len() {
                let (g, w) = (
                    &got[row * vocab..(row + 1) * vocab],
                    &want[row * vocab..(row + 1) * vocab],
                );
                if p.teacher_forced.margin[row] > 4.0 * tol {
                    assert_eq!(
                        argmax(g),
                        argmax(w),
                        "{dtype} KV, {}: argmax differs at row {row}",
                        p.name
                    );
                }
            }
        }
    }
}

/// Decode reads K/V written by earlier steps across block boundaries (the "long" prompt spans 7
/// blocks of 16): each step's logits match the f32-KV teacher-forced logits.
#[test]
fn kv_dtypes_decode_across_blocks() {
    let golden = read_golden("tiny-llama-f32.json");
    let p = golden
        .prompts
        .iter()
        .find(|p| p.name == "long")
        .expect("the long prompt");
    let ids = &p.teacher_forced.ids;
    assert!(ids.len() > 96, "the prompt spans several blocks");
    let (want, _) = teacher_forced_logits(&mut runner(KvDtype::F32, ids.len()), ids);
    for (dtype, tol) in [
        (KvDtype::F32, 1e-4),
        (KvDtype::F16, F16_TOL),
        (KvDtype::Q8, Q8_TOL),
    ] {
        let got = prefill_then_decode(&mut runner(dtype, ids.len()), ids, 21);
        let err = max_abs_diff(&got, &want);
        eprintln!(
            "{dtype} KV, prefill 21 + decode {}: max |Δlogit| = {err:.2e}",
            ids.len() - 21
        );
        assert!(
            err <= tol,
            "{dtype} KV decode: logits differ from f32 KV by {err} (> {tol})"
        );
    }
}
