//! Golden tests on tiny random-weight mixture-of-experts checkpoints generated with
//! transformers (scripts/goldens/tiny_moe.py), each run twice: from the HF directory
//! (config.json + float16 safetensors, one matrix per expert) and from the GGUF that llama.cpp's
//! convert_hf_to_gguf.py made of it (f16, the experts stacked into 3-D `ffn_*_exps` tensors).
//!
//! * tiny-mixtral: 4 experts, top-2, softmax then top-k then renormalised; its GGUF is arch
//!   `llama` with `llama.expert_count` (and Llama's permuted Q/K rows).
//! * tiny-qwen2-moe: 4 experts, top-2, `norm_topk_prob` false, a shared expert (48) scaled by
//!   `sigmoid(shared_expert_gate · x)`, q/k/v biases.
//! * tiny-qwen3-moe: 4 experts, top-2, `norm_topk_prob` true, q/k norm.
//!
//! Tolerances as golden_tiny_qwen.rs: `TINY_LOGIT_TOL` (tests/common) absolute on the reference's top-20 logits of
//! every teacher-forced row, the argmax equal where the top-1/top-2 margin exceeds `TINY_MARGIN`, and
//! the greedy continuation (prefill, then one token at a time through the KV cache) equal.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_engine::executor::Executor;

/// Run the model at `path` against `golden` and check that routed tokens were counted;
/// returns the largest logit difference.
fn check(path: &Path, golden: &str, arch: &str) -> f32 {
    let (runner, worst) = check_tiny_golden(path, golden, arch);
    let counts = runner.expert_token_counts().expect("an MoE model counts");
    let total: u64 = (0..counts.len()).map(|i| counts.get(i)).sum();
    assert!(total > 0, "{}: no routed tokens counted", file_label(path));
    worst
}

fn hf(dir: &str) -> PathBuf {
    fixtures().join(dir)
}

fn gguf(dir: &str) -> PathBuf {
    fixtures().join(format!("{dir}.gguf"))
}

#[test]
fn tiny_mixtral_hf_matches_transformers() {
    check(&hf("tiny-mixtral"), "tiny-mixtral.json", "mixtral");
}

#[test]
fn tiny_mixtral_gguf_matches_transformers() {
    let c = load(&gguf("tiny-mixtral")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!((moe.n_experts, moe.top_k, moe.expert_ffn), (4, 2, 32));
    assert!(moe.norm_topk_prob && moe.shared_expert_ffn.is_none());
    check(&gguf("tiny-mixtral"), "tiny-mixtral.json", "mixtral");
}

#[test]
fn tiny_qwen2_moe_hf_matches_transformers() {
    let c = load(&hf("tiny-qwen2-moe")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(moe.shared_expert_ffn, Some(48));
    assert!(!moe.norm_topk_prob && c.attention_bias);
    check(&hf("tiny-qwen2-moe"), "tiny-qwen2-moe.json", "qwen2_moe");
}

#[test]
fn tiny_qwen2_moe_gguf_matches_transformers() {
    let c = load(&gguf("tiny-qwen2-moe")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(
        (moe.shared_expert_ffn, moe.norm_topk_prob),
        (Some(48), false)
    );
    check(&gguf("tiny-qwen2-moe"), "tiny-qwen2-moe.json", "qwen2_moe");
}

#[test]
fn tiny_qwen3_moe_hf_matches_transformers() {
    let c = load(&hf("tiny-qwen3-moe")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(moe.sparse_layers, [true, true]);
    assert!(moe.norm_topk_prob && c.qk_norm);
    check(&hf("tiny-qwen3-moe"), "tiny-qwen3-moe.json", "qwen3_moe");
}

#[test]
fn tiny_qwen3_moe_gguf_matches_transformers() {
    let c = load(&gguf("tiny-qwen3-moe")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(moe.sparse_layers, [true, true]);
    assert!(moe.norm_topk_prob);
    check(&gguf("tiny-qwen3-moe"), "tiny-qwen3-moe.json", "qwen3_moe");
}
