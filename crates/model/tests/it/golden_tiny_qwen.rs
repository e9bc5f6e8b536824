//! Golden tests on tiny random-weight Qwen2 / Qwen3 checkpoints generated with transformers
//! (scripts/goldens/tiny_qwen.py), each run twice: from the HF directory (config.json +
//! float16 safetensors) and from the GGUF that llama.cpp's convert_hf_to_gguf.py made of it
//! (f16, the same weights bit for bit).
//!
//! * tiny-qwen2: q/k/v biases, untied head. Its GGUF keeps HF's Q/K row order, so it only
//!   matches with NeoX RoPE (llama.cpp's rope type for qwen2).
//! * tiny-qwen2-swa: tied embeddings, a sliding window of 8 on layers 1-2 (layer 0 full,
//!   `max_window_layers` 1); prompts run up to 107 tokens, so the window matters (the script
//!   checks the windowed and full-attention goldens differ by > 0.1 in a top-1 logit). The
//!   converter writes no window for qwen2 (llama.cpp runs Qwen2 with full attention), so its
//!   GGUF is checked against transformers with the window off.
//! * tiny-qwen3: per-head q/k RMSNorm, head_dim 24 (hidden 64 / 4 heads would be 16), tied
//!   embeddings, rope theta 1e6.
//! * tiny-qwen2-yarn (scripts/goldens/tiny_phi3.py): YaRN scaling, factor 4 from an original
//!   length of 32 (attention factor 0.1 ln 4 + 1 on cos and sin); prompts run up to 107
//!   tokens. Its GGUF carries `rope.scaling.type = yarn`, the factor and original length.
//!
//! Weights are exact in f32 on both sides and the compute is f32, so the tolerances are the
//! tiny-llama ones: `TINY_LOGIT_TOL` (tests/common) absolute on the reference's top-20 logits of every
//! teacher-forced row, the argmax equal wherever the reference's top-1/top-2 margin exceeds
//! `TINY_MARGIN`, and the greedy continuation (prompt prefill, then one token at a time through the
//! KV cache) equal to transformers'.

use crate::common;

use std::path::Path;

use common::*;
use kestrel_model::config::RopeScaling;
use kestrel_model::ModelFormat;

/// Run the model at `path` against `golden`; returns the largest logit difference.
fn check(path: &Path, golden: &str, arch: &str) -> f32 {
    check_tiny_golden(path, golden, arch).1
}

fn hf(dir: &str) -> std::path::PathBuf {
    fixtures().join(dir)
}

fn gguf(dir: &str) -> std::path::PathBuf {
    fixtures().join(format!("{dir}.gguf"))
}

#[test]
fn tiny_qwen2_hf_matches_transformers() {
    check(&hf("tiny-qwen2"), "tiny-qwen2.json", "qwen2");
}

#[test]
fn tiny_qwen2_gguf_matches_transformers() {
    check(&gguf("tiny-qwen2"), "tiny-qwen2.json", "qwen2");
}

#[test]
fn tiny_qwen2_sliding_window_hf_matches_transformers() {
    let loaded = load(&hf("tiny-qwen2-swa"));
    let c = &loaded.config;
    assert_eq!(c.sliding_window, Some(8));
    assert_eq!(
        (0..3).map(|l| c.layer_window(l)).collect::<Vec<_>>(),
        [None, Some(8), Some(8)]
    );
    assert!(c.tie_word_embeddings && c.attention_bias);
    check(&hf("tiny-qwen2-swa"), "tiny-qwen2-swa.json", "qwen2");
}

#[test]
fn tiny_qwen2_sliding_window_gguf_runs_full_attention_like_llama_cpp() {
    let path = gguf("tiny-qwen2-swa");
    let loaded = load(&path);
    assert_eq!(loaded.format, ModelFormat::Gguf);
    assert_eq!(
        loaded.config.sliding_window, None,
        "the converter writes no window"
    );
    check(&path, "tiny-qwen2-swa-full-attention.json", "qwen2");
}

#[test]
fn tiny_qwen3_hf_matches_transformers() {
    check(&hf("tiny-qwen3"), "tiny-qwen3.json", "qwen3");
}

#[test]
fn tiny_qwen3_gguf_matches_transformers() {
    let path = gguf("tiny-qwen3");
    let c = load(&path).config;
    assert!(c.qk_norm && !c.attention_bias && c.tie_word_embeddings);
    assert_eq!((c.head_dim, c.hidden_size, c.n_heads), (24, 64, 4));
    check(&path, "tiny-qwen3.json", "qwen3");
}

fn assert_yarn(path: &Path) {
    let c = load(path).config;
    let Some(RopeScaling::Yarn {
        factor,
        original_max_position,
        beta_fast,
        beta_slow,
        truncate,
        attention_factor,
    }) = c.rope_scaling
    else {
        panic!("expected YaRN, got {:?}", c.rope_scaling);
    };
    assert_eq!((factor, original_max_position), (4.0, 32));
    assert_eq!((beta_fast, beta_slow, truncate), (32.0, 1.0, true));
    let expected = 0.1 * 4f32.ln() + 1.0;
    assert!(
        (attention_factor - expected).abs() < 1e-6,
        "{attention_factor}"
    );
}

#[test]
fn tiny_qwen2_yarn_hf_matches_transformers() {
    let path = hf("tiny-qwen2-yarn");
    assert_yarn(&path);
    check(&path, "tiny-qwen2-yarn.json", "qwen2");
}

#[test]
fn tiny_qwen2_yarn_gguf_matches_transformers() {
    let path = gguf("tiny-qwen2-yarn");
    assert_yarn(&path);
    check(&path, "tiny-qwen2-yarn.json", "qwen2");
}
