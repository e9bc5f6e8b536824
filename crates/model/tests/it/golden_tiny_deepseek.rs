//! Golden tests on the tiny random-weight DeepSeek checkpoints (scripts/goldens/tiny_deepseek.py),
//! from the HF directory and from the GGUF llama.cpp's converter made of it (`deepseek2`, with
//! `kv_b` split into `attn_k_b` / `attn_v_b`):
//!
//! * tiny-deepseek-v2: latent attention without a query bottleneck, YaRN with `mscale_all_dim`,
//!   a dense first layer, then 4 routed experts (softmax top-2, not renormalized, scaled by
//!   1.5) and a shared expert;
//! * tiny-deepseek-v3: a query bottleneck, 8 routed experts in 4 groups (top-2 groups by their
//!   two best scores), sigmoid scores with a choice bias, renormalized and scaled by 2.5.
//!
//! Tolerances as golden_tiny_moe.rs. Besides: the KV cache holds one row of latent + rotary
//! key per token and layer (no value rows).

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_engine::executor::Executor;
use kestrel_model::config::{GroupScore, ModelConfig, Scoring};

fn hf(dir: &str) -> PathBuf {
    fixtures().join(dir)
}

fn gguf(dir: &str) -> PathBuf {
    fixtures().join(format!("{dir}.gguf"))
}

/// Run the model at `path` against `golden`; the routed tokens were counted and the cache
/// holds what MLA promises.
fn check(path: &Path, golden: &str, arch: &str) {
    let (runner, worst) = check_tiny_golden(path, golden, arch);
    eprintln!(
        "{}: largest top-20 logit difference {worst:.1e}",
        file_label(path)
    );
    let counts = runner.expert_token_counts().expect("an MoE model counts");
    let total: u64 = (0..counts.len()).map(|i| counts.get(i)).sum();
    assert!(total > 0, "{}: no routed tokens counted", file_label(path));
    let shape = runner.kv_shape();
    assert!(shape.keys_only && shape.n_kv_heads == 1 && shape.head_dim == 32 + 8);
    assert_eq!(
        shape.bytes_per_token(),
        3 * 40 * 4,
        "3 layers of 40 f32 values"
    );
}

/// The sizes both fixtures share.
fn common_sizes(c: &ModelConfig) {
    let mla = c.mla.as_ref().expect("latent attention");
    assert_eq!(
        (
            mla.kv_lora_rank,
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim
        ),
        (32, 16, 8, 16)
    );
    assert_eq!((c.n_kv_heads, c.head_dim, c.rotary_dim), (1, 40, 8));
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!(moe.sparse_layers, [false, true, true]);
    assert_eq!((moe.expert_ffn, moe.shared_expert_ffn), (32, Some(32)));
}

fn v2_sizes(c: &ModelConfig) {
    common_sizes(c);
    let (mla, moe) = (c.mla.as_ref().unwrap(), c.moe.as_ref().unwrap());
    assert_eq!(mla.q_lora_rank, None);
    // mscale(4, 0.707)² / sqrt(24)
    let m = 0.1 * 0.707 * 4f64.ln() + 1.0;
    assert!((f64::from(mla.softmax_scale) - m * m / 24f64.sqrt()).abs() < 1e-5);
    assert_eq!((moe.n_experts, moe.routing.scoring), (4, Scoring::Softmax));
    assert!(!moe.norm_topk_prob && moe.routing.groups.is_none());
    assert_eq!(moe.routing.scale, 1.5);
}

fn v3_sizes(c: &ModelConfig) {
    common_sizes(c);
    let (mla, moe) = (c.mla.as_ref().unwrap(), c.moe.as_ref().unwrap());
    assert_eq!(mla.q_lora_rank, Some(24));
    assert_eq!((moe.n_experts, moe.routing.scoring), (8, Scoring::Sigmoid));
    let groups = moe.routing.groups.expect("group-limited");
    assert_eq!(
        (groups.n_groups, groups.top_groups, groups.score),
        (4, 2, GroupScore::TopTwoSum)
    );
    assert!(moe.norm_topk_prob);
    assert_eq!(moe.routing.scale, 2.5);
}

#[test]
fn tiny_deepseek_v2_hf_matches_transformers() {
    v2_sizes(&load(&hf("tiny-deepseek-v2")).config);
    check(
        &hf("tiny-deepseek-v2"),
        "tiny-deepseek-v2.json",
        "deepseek_v2",
    );
}

#[test]
fn tiny_deepseek_v3_hf_matches_transformers() {
    v3_sizes(&load(&hf("tiny-deepseek-v3")).config);
    check(
        &hf("tiny-deepseek-v3"),
        "tiny-deepseek-v3.json",
        "deepseek_v3",
    );
}

#[test]
fn tiny_deepseek_v2_gguf_matches_transformers() {
    let c = load(&gguf("tiny-deepseek-v2")).config;
    assert_eq!(c.architecture.name(), "deepseek_v2");
    v2_sizes(&c);
    check(
        &gguf("tiny-deepseek-v2"),
        "tiny-deepseek-v2.json",
        "deepseek_v2",
    );
}

/// llama.cpp writes V3 as `deepseek2` too; its routing comes from `expert_gating_func`
/// (sigmoid), `expert_group_count` / `_used_count` and the `exp_probs_b` bias tensors.
#[test]
fn tiny_deepseek_v3_gguf_matches_transformers() {
    let c = load(&gguf("tiny-deepseek-v3")).config;
    v3_sizes(&c);
    check(
        &gguf("tiny-deepseek-v3"),
        "tiny-deepseek-v3.json",
        "deepseek_v2",
    );
}
