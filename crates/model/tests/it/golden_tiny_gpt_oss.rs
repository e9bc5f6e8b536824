//! Golden tests on a tiny random-weight gpt-oss checkpoint generated with transformers
//! (scripts/goldens/tiny_gpt_oss.py), run from the HF directory (bfloat16 safetensors; the
//! experts in `gate_up_proj` / `down_proj`, gate and up interleaved) and from the GGUF that
//! llama.cpp's convert_hf_to_gguf.py made of it (arch `gpt-oss`; the experts as ggml MXFP4
//! `ffn_{gate,up,down}_exps` tensors, the rest f32).
//!
//! The model has every gpt-oss feature: q/k/v/o biases, a sink logit per head, a window of 8
//! on layer 0 and full attention on layer 1 (the prompts run to 180 tokens), YaRN RoPE with
//! `truncate: false`, 4 experts top-2 with a router bias, expert biases and the clamped SwiGLU
//! (about 2% of gate/up pre-activations pass the limit of 7 on the long prompt).
//!
//! The HF directory and the BF16 GGUF (the converter's output for the bfloat16 checkpoint) are
//! held to golden_tiny_qwen.rs's tolerances: `TINY_LOGIT_TOL` (tests/common) absolute on the
//! reference's top-20 logits of every teacher-forced row, the argmax equal where the
//! top-1/top-2 margin exceeds `TINY_MARGIN`, and the greedy continuation (prefill, then one
//! token at a time through the KV cache) equal.
//!
//! The MXFP4 GGUF's expert weights are the checkpoint's exactly (drawn on the MXFP4 grid;
//! checked value for value here), but its MXFP4 products multiply 8-bit (Q8_0) activations, as
//! llama.cpp's do, which moves a row's logits by about 1% of the largest |logit| on average
//! (measured: mean row error 0.08-0.10, most rows under 0.35, at max |logit| ~10), and a token
//! whose top-2 experts nearly tie may route differently (the worst chat row moves by 0.5). So it is held to iquant_model.rs's tolerance,
//! `0.04 · max |logit|`, on the mean over rows of each row's largest top-20 difference, and the
//! argmax must agree wherever the reference margin exceeds twice that; its greedy
//! continuations are not compared (they diverge at near-ties: the chat prompt's reference
//! continuation has a margin of 0.0005).

use crate::common;

use std::path::PathBuf;

use common::*;
use kestrel_engine::executor::Executor;
use kestrel_kernels::DType;
use kestrel_model::config::{ExpertActivation, ModelConfig};
use kestrel_model::ModelRunner;

const GOLDEN: &str = "tiny-gpt-oss.json";

fn hf() -> PathBuf {
    fixtures().join("tiny-gpt-oss")
}

fn gguf(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// The quantized-activation tolerance, relative to the largest |logit| of the reference.
const MXFP4_TOL: f32 = 0.04;

/// The configuration both files must give.
fn assert_config(c: &ModelConfig) {
    assert_eq!(c.architecture.name(), "gpt_oss");
    assert!(c.architecture.has_attention_sinks() && c.attention_bias);
    assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (4, 2, 16));
    assert_eq!((c.layer_window(0), c.layer_window(1)), (Some(8), None));
    match &c.rope_scaling {
        Some(kestrel_model::config::RopeScaling::Yarn {
            factor, truncate, ..
        }) => assert_eq!((*factor, *truncate), (4.0, false)),
        other => panic!("expected YaRN, got {other:?}"),
    }
    let moe = c.moe.as_ref().expect("sparse");
    assert_eq!((moe.n_experts, moe.top_k, moe.expert_ffn), (4, 2, 32));
    assert_eq!(moe.activation, ExpertActivation::GPT_OSS);
    assert!(moe.norm_topk_prob && moe.shared_expert_ffn.is_none());
    // Harmony's `<|return|>` and `<|call|>` both end generation.
    assert_eq!(c.eos_token_ids, [388, 389]);
}

/// Runs the golden check and asserts routed tokens were counted.
fn check(path: &std::path::Path) -> f32 {
    let (runner, worst) = check_tiny_golden(path, GOLDEN, "gpt_oss");
    let counts = runner.expert_token_counts().expect("an MoE model counts");
    let total: u64 = (0..counts.len()).map(|i| counts.get(i)).sum();
    assert!(total > 0, "no routed tokens counted");
    worst
}

/// Harmony's `<|return|>` and `<|call|>` end a reply; `<|end|>` (which ends Phi-3's turns, so
/// it is a well-known end of generation) only ends a message here.
fn assert_ends(loaded: &kestrel_model::LoadedModel) {
    let t = &loaded.tokenizer;
    let id = |s: &str| t.piece_to_id(s).expect("in the vocabulary");
    let ends = t.eos_ids();
    assert_eq!(ends[0], id("<|return|>"), "EOS first");
    assert!(ends.contains(&id("<|call|>")), "{ends:?}");
    assert!(!ends.contains(&id("<|end|>")), "{ends:?}");
}

#[test]
fn tiny_gpt_oss_hf_matches_transformers() {
    let loaded = load(&hf());
    assert_config(&loaded.config);
    assert_ends(&loaded);
    check(&hf());
}

#[test]
fn tiny_gpt_oss_bf16_gguf_matches_transformers() {
    assert_config(&load(&gguf("tiny-gpt-oss-bf16.gguf")).config);
    check(&gguf("tiny-gpt-oss-bf16.gguf"));
}

/// Layer `l`'s expert matrices of `a` and `b`, dequantized, are equal value for value.
fn assert_same_experts(a: &ModelRunner, b: &ModelRunner, l: usize) {
    let (ma, mb) = (
        a.model().moe_block(l).unwrap(),
        b.model().moe_block(l).unwrap(),
    );
    for (ea, eb) in ma.experts.iter().zip(&mb.experts) {
        for (la, lb) in [(&ea.gate, &eb.gate), (&ea.up, &eb.up), (&ea.down, &eb.down)] {
            let (mut x, mut y) = (vec![0.0; la.cols()], vec![0.0; lb.cols()]);
            for r in 0..la.rows() {
                la.dequantize_row(r, &mut x);
                lb.dequantize_row(r, &mut y);
                assert_eq!(x, y, "layer {l}: expert row {r}");
            }
        }
    }
}

#[test]
fn tiny_gpt_oss_gguf_with_mxfp4_experts_matches_transformers() {
    let path = gguf("tiny-gpt-oss.gguf");
    let loaded = load(&path);
    assert_config(&loaded.config);
    assert_ends(&loaded);
    let mut mx = runner(loaded, 256);
    let moe = mx.model().moe_block(0).expect("layer 0 is sparse");
    assert!(moe.experts.iter().all(|e| e.gate.dtype() == DType::MXFP4));
    assert!(moe.router.has_bias() && moe.experts[0].down.has_bias());
    let hf_runner = runner(load(&hf()), 64);
    for l in 0..2 {
        assert_same_experts(&hf_runner, &mx, l);
    }
    let golden = read_golden(GOLDEN);
    for p in &golden.prompts {
        let (logits, vocab) = teacher_forced_logits(&mut mx, &p.teacher_forced.ids);
        let tf = &p.teacher_forced;
        let max_logit = tf
            .topk_logits
            .iter()
            .flatten()
            .fold(0f32, |m, x| m.max(x.abs()));
        let tol = MXFP4_TOL * max_logit;
        let row_err = |(i, (ids, refs)): (usize, (&Vec<u32>, &Vec<f32>))| {
            let row = &logits[i * vocab..(i + 1) * vocab];
            let diffs = ids
                .iter()
                .zip(refs)
                .map(|(&id, r)| (row[id as usize] - r).abs());
            diffs.fold(0f32, f32::max)
        };
        let errs: Vec<f32> = tf
            .topk_ids
            .iter()
            .zip(&tf.topk_logits)
            .enumerate()
            .map(row_err)
            .collect();
        let mean = errs.iter().sum::<f32>() / errs.len() as f32;
        let worst = errs.iter().fold(0f32, |m, &e| m.max(e));
        eprintln!(
            "{}: mean row error {mean:.3}, worst {worst:.3}, tolerance {tol:.3}",
            p.name
        );
        assert!(mean < tol, "{}: mean row error {mean} ≥ {tol}", p.name);
        assert!(
            mean > 1e-3,
            "{}: the MXFP4 products look exact ({mean})",
            p.name
        );
        let agreement = compare(p, &logits, vocab, 2.0 * tol);
        assert!(
            agreement.argmax_mismatches.is_empty(),
            "{}: argmax differs at rows {:?}",
            p.name,
            agreement.argmax_mismatches
        );
    }
}

/// The checkpoint's harmony chat template renders the golden chat prompt as transformers did,
/// and the text encodes to the same ids.
#[test]
fn tiny_gpt_oss_harmony_template_renders_like_transformers() {
    use kestrel_model::chat_template::{ChatMessage, ChatTemplate};
    let loaded = load(&hf());
    let golden = read_golden(GOLDEN);
    let chat = golden
        .prompts
        .iter()
        .find(|p| p.kind == "chat_template")
        .expect("a chat prompt");
    let source = loaded.tokenizer.chat_template().expect("a template");
    let template = ChatTemplate::new(source, Some("<s>"), Some("<|return|>")).expect("compiles");
    let messages = [ChatMessage::new("user", "What is the capital of France?")];
    let text = template.render(&messages, true).expect("renders");
    assert_eq!(text, chat.text);
    assert!(text.ends_with("<|start|>assistant"));
    let ids = loaded.tokenizer.encode(&text, false).expect("encodes");
    assert_eq!(ids, chat.prompt_ids);
}
