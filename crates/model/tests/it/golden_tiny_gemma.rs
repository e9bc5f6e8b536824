//! Golden tests on tiny random-weight Gemma 3 (text) and Gemma 2 checkpoints generated with
//! transformers (scripts/goldens/tiny_gemma.py), each run twice: from the HF directory
//! (config.json + float32 safetensors; norm weights `w` of `1 + w`) and from the GGUF that
//! llama.cpp's convert_hf_to_gguf.py made of it (f32; norm weights stored as `1 + w`).
//!
//! * tiny-gemma3: 6 layers, layers 0-4 sliding (window 8, local RoPE base 1e4), layer 5
//!   global (base 1e6, linear RoPE scaling x8), q/k norm, head_dim 16 with hidden 32 and 4
//!   heads, post-norms, GeGLU, embeddings scaled by sqrt(32), final logits soft-capped at 20.
//!   Prompts run to 107 tokens, far past the window (the script checks that the window
//!   changes the logits).
//! * tiny-gemma2: 4 layers alternating sliding (window 8) and global, attention scores
//!   soft-capped at 5 and final logits at 20, `query_pre_attn_scalar` 16 with head_dim 8. GGUF
//!   files carry no `query_pre_attn_scalar` (llama.cpp scales by head_dim^-1/2), so the GGUF is
//!   checked against transformers with the scalar set to head_dim.
//!
//! Tolerances as golden_tiny_qwen.rs: `TINY_LOGIT_TOL` (tests/common) absolute on the reference's top-20 logits of
//! every teacher-forced row, the argmax equal where the margin exceeds `TINY_MARGIN`, the greedy
//! continuation through the KV cache equal.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_model::ModelFormat;

/// Run the model at `path` against `golden`; returns the largest logit difference.
fn check(path: &Path, golden: &str, arch: &str) -> f32 {
    check_tiny_golden(path, golden, arch).1
}

fn hf(dir: &str) -> PathBuf {
    fixtures().join(dir)
}

fn gguf(dir: &str) -> PathBuf {
    fixtures().join(format!("{dir}.gguf"))
}

/// The Gemma 3 features both formats must read the same way.
fn assert_gemma3_config(path: &Path, norm_offset: f32) {
    let c = load(path).config;
    let g = c.gemma.as_ref().expect("Gemma features");
    assert_eq!(g.norm_offset, norm_offset);
    assert!(c.qk_norm && c.tie_word_embeddings);
    assert_eq!((c.head_dim, c.hidden_size, c.n_heads), (16, 32, 4));
    let windows: Vec<_> = (0..6).map(|l| c.layer_window(l)).collect();
    assert_eq!(windows, [Some(8), Some(8), Some(8), Some(8), Some(8), None]);
    assert_eq!((c.rope_theta, g.local_rope_theta), (1e6, 1e4));
    assert_eq!(g.final_softcap, Some(20.0));
    assert_eq!(g.attn_softcap, None);
    assert_eq!(g.attention_scale, 0.25);
    // Local layers: base 1e4 unscaled; the global layer: base 1e6 divided by 8.
    assert_eq!(c.layer_rope_inv_freq(0)[1], 1e4f64.powf(-2.0 / 16.0) as f32);
    assert_eq!(
        c.layer_rope_inv_freq(5)[1],
        (1e6f64.powf(-2.0 / 16.0) / 8.0) as f32
    );
}

#[test]
fn tiny_gemma3_hf_matches_transformers() {
    let path = hf("tiny-gemma3");
    assert_gemma3_config(&path, 1.0);
    check(&path, "tiny-gemma3.json", "gemma3");
}

#[test]
fn tiny_gemma3_gguf_matches_transformers() {
    let path = gguf("tiny-gemma3");
    assert_eq!(load(&path).format, ModelFormat::Gguf);
    assert_gemma3_config(&path, 0.0);
    check(&path, "tiny-gemma3.json", "gemma3");
}

#[test]
fn tiny_gemma2_hf_matches_transformers() {
    let path = hf("tiny-gemma2");
    let c = load(&path).config;
    let g = c.gemma.as_ref().expect("Gemma features");
    assert!(!c.qk_norm && c.tie_word_embeddings);
    assert_eq!((g.attn_softcap, g.final_softcap), (Some(5.0), Some(20.0)));
    assert_eq!(g.attention_scale, 0.25, "query_pre_attn_scalar 16");
    let windows: Vec<_> = (0..4).map(|l| c.layer_window(l)).collect();
    assert_eq!(windows, [Some(8), None, Some(8), None]);
    check(&path, "tiny-gemma2.json", "gemma2");
}

#[test]
fn tiny_gemma2_gguf_matches_transformers_with_head_dim_scale() {
    let path = gguf("tiny-gemma2");
    let c = load(&path).config;
    let g = c.gemma.as_ref().expect("Gemma features");
    assert_eq!((g.attn_softcap, g.final_softcap), (Some(5.0), Some(20.0)));
    let head_dim_scale = 1.0 / (c.head_dim as f32).sqrt();
    assert_eq!(g.attention_scale, head_dim_scale, "llama.cpp's scale");
    let windows: Vec<_> = (0..4).map(|l| c.layer_window(l)).collect();
    assert_eq!(windows, [Some(8), None, Some(8), None]);
    check(&path, "tiny-gemma2-head-dim-scale.json", "gemma2");
}
