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
//! Tolerances as golden_tiny_qwen.rs: `LOGIT_TOL` absolute on the reference's top-20 logits of
//! every teacher-forced row, the argmax equal where the top-1/top-2 margin exceeds `MARGIN`, and
//! the greedy continuation (prefill, then one token at a time through the KV cache) equal.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_engine::executor::Executor;
use kestrel_model::config::Architecture;

const LOGIT_TOL: f32 = 2e-3;
const MARGIN: f32 = 1e-2;

/// Run the model at `path` against `golden`; returns the largest logit difference.
fn check(path: &Path, golden: &str, arch: Architecture) -> f32 {
    let name = path
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let golden = read_golden(golden);
    let loaded = load(path);
    assert_eq!(loaded.config.architecture, arch, "{name}: architecture");
    for p in golden.prompts.iter().filter(|p| p.kind != "chat_template") {
        let ids = loaded.tokenizer.encode(&p.text, true).expect("encodes");
        assert_eq!(ids, p.prompt_ids, "{name}/{}: prompt ids differ", p.name);
    }
    let mut runner = runner(loaded, 256);
    let mut worst = 0.0f32;
    for p in &golden.prompts {
        let (logits, vocab) = teacher_forced_logits(&mut runner, &p.teacher_forced.ids);
        let label = format!("{name}/{}", p.name);
        let err = assert_logits_agree(&label, p, &logits, vocab, LOGIT_TOL, MARGIN);
        let greedy = greedy_ids(&mut runner, &p.prompt_ids, p.greedy.ids.len());
        assert_eq!(
            greedy, p.greedy.ids,
            "{name}/{}: greedy continuation",
            p.name
        );
        worst = worst.max(err);
    }
    let counts = runner.expert_token_counts().expect("an MoE model counts");
    let total: u64 = (0..counts.len()).map(|i| counts.get(i)).sum();
    assert!(total > 0, "{name}: no routed tokens counted");
    println!("{name}: max |logit difference| {worst:.2e}");
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
    check(
        &hf("tiny-mixtral"),
        "tiny-mixtral.json",
        Architecture::Mixtral,
    );
}

#[test]
fn tiny_mixtral_gguf_matches_transformers() {
    let c = load(&gguf("tiny-mixtral")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!((moe.n_experts, moe.top_k, moe.expert_ffn), (4, 2, 32));
    assert!(moe.norm_topk_prob && moe.shared_expert_ffn.is_none());
    check(
        &gguf("tiny-mixtral"),
        "tiny-mixtral.json",
        Architecture::Mixtral,
    );
}

#[test]
fn tiny_qwen2_moe_hf_matches_transformers() {
    let c = load(&hf("tiny-qwen2-moe")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(moe.shared_expert_ffn, Some(48));
    assert!(!moe.norm_topk_prob && c.attention_bias);
    check(
        &hf("tiny-qwen2-moe"),
        "tiny-qwen2-moe.json",
        Architecture::Qwen2Moe,
    );
}

#[test]
fn tiny_qwen2_moe_gguf_matches_transformers() {
    let c = load(&gguf("tiny-qwen2-moe")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(
        (moe.shared_expert_ffn, moe.norm_topk_prob),
        (Some(48), false)
    );
    check(
        &gguf("tiny-qwen2-moe"),
        "tiny-qwen2-moe.json",
        Architecture::Qwen2Moe,
    );
}

#[test]
fn tiny_qwen3_moe_hf_matches_transformers() {
    let c = load(&hf("tiny-qwen3-moe")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(moe.sparse_layers, [true, true]);
    assert!(moe.norm_topk_prob && c.qk_norm);
    check(
        &hf("tiny-qwen3-moe"),
        "tiny-qwen3-moe.json",
        Architecture::Qwen3Moe,
    );
}

#[test]
fn tiny_qwen3_moe_gguf_matches_transformers() {
    let c = load(&gguf("tiny-qwen3-moe")).config;
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(moe.sparse_layers, [true, true]);
    assert!(moe.norm_topk_prob);
    check(
        &gguf("tiny-qwen3-moe"),
        "tiny-qwen3-moe.json",
        Architecture::Qwen3Moe,
    );
}
