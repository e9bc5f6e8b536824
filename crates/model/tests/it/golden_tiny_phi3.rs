//! Golden tests on tiny random-weight Phi-3 checkpoints generated with transformers
//! (scripts/goldens/tiny_phi3.py), each run twice: from the HF directory (config.json +
//! float16 safetensors, fused `qkv_proj` / `gate_up_proj`) and from the GGUF that llama.cpp's
//! convert_hf_to_gguf.py made of it (f16; fused `attn_qkv`, and `ffn_up` holding gate and up).
//!
//! * tiny-phi3: partial rotary (`partial_rotary_factor` 0.75: 12 of head_dim 16; GGUF
//!   `rope.dimension_count` 12), GQA 4/2, untied head.
//! * tiny-phi3-longrope: LongRoPE, original length 16, `max_position_embeddings` 256
//!   (attention factor sqrt(2)), tied embeddings. transformers uses the long factors for a
//!   sequence longer than 16 tokens and the short ones otherwise, re-deciding every forward
//!   pass; Kestrel decides once from `rope_context_length` (default 256: long). Every
//!   teacher-forced sequence is longer than 16, so those rows are compared with the default
//!   model; greedy steps are compared where transformers' sequence was past 16 (long) and, with
//!   a model set up for 16 positions (short factors), where it was within 16.
//!
//! Tolerances are golden_tiny_qwen.rs's: `LOGIT_TOL` absolute on the reference's top-20 logits
//! of every teacher-forced row, the argmax equal where the reference's top-1/top-2 margin
//! exceeds `MARGIN`, greedy continuations (prefill, then one token at a time through the KV
//! cache) equal.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_model::arch::{DecoderModel, TensorNaming};
use kestrel_model::config::{ModelConfig, RopeScaling};
use kestrel_model::weights::{FusedSplit, TensorSource};
use kestrel_model::{load_model_using, BuildModel, LoadedModel, ModelError, Weights};

const LOGIT_TOL: f32 = 2e-3;
const MARGIN: f32 = 1e-2;
/// tiny-phi3-longrope's `original_max_position_embeddings`.
const LONGROPE_ORIG: usize = 16;

fn hf(dir: &str) -> PathBuf {
    fixtures().join(dir)
}

fn gguf(dir: &str) -> PathBuf {
    fixtures().join(format!("{dir}.gguf"))
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned())
}

/// Builds the model with `rope_context_length` set to `context` (fused tensors split as the
/// loader does).
struct WithRopeContext(usize);

impl BuildModel for WithRopeContext {
    type Error = ModelError;

    fn build(
        &self,
        config: &ModelConfig,
        weights: Weights<'_>,
    ) -> Result<DecoderModel, ModelError> {
        let mut config = config.clone();
        config.rope_context_length = self.0;
        let naming = weights.naming();
        DecoderModel::load(
            &config,
            &FusedSplit::new(weights.source(), &config, naming),
            naming,
        )
    }
}

/// Teacher-forced logits of every prompt, and greedy continuations where `greedy_steps` says
/// how many leading steps to compare (all: `usize::MAX`). Returns the largest logit difference.
fn check_with(
    loaded: LoadedModel,
    golden: &str,
    label: &str,
    logits: bool,
    greedy_steps: &dyn Fn(&GoldenPrompt) -> usize,
) -> f32 {
    let golden = read_golden(golden);
    for p in golden.prompts.iter().filter(|p| p.kind != "chat_template") {
        let ids = loaded.tokenizer.encode(&p.text, true).expect("encodes");
        assert_eq!(ids, p.prompt_ids, "{label}/{}: prompt ids differ", p.name);
    }
    let mut runner = runner(loaded, 256);
    let mut worst = 0.0f32;
    for p in &golden.prompts {
        if logits {
            let (logits, vocab) = teacher_forced_logits(&mut runner, &p.teacher_forced.ids);
            let err = assert_logits_agree(
                &format!("{label}/{}", p.name),
                p,
                &logits,
                vocab,
                LOGIT_TOL,
                MARGIN,
            );
            worst = worst.max(err);
        }
        let n = greedy_steps(p).min(p.greedy.ids.len());
        if n > 0 {
            let greedy = greedy_ids(&mut runner, &p.prompt_ids, n);
            assert_eq!(
                greedy,
                p.greedy.ids[..n],
                "{label}/{}: greedy continuation",
                p.name
            );
        }
    }
    worst
}

fn check(path: &Path, golden: &str) -> f32 {
    let loaded = load(path);
    assert_eq!(loaded.config.architecture.name(), "phi3");
    check_with(loaded, golden, &name_of(path), true, &|_| usize::MAX)
}

#[test]
fn tiny_phi3_hf_matches_transformers() {
    let path = hf("tiny-phi3");
    let c = load(&path).config;
    assert_eq!((c.head_dim, c.rotary_dim), (16, 12), "partial rotary 0.75");
    assert!(!c.tie_word_embeddings && c.rope_scaling.is_none() && c.sliding_window.is_none());
    check(&path, "tiny-phi3.json");
}

#[test]
fn tiny_phi3_gguf_matches_transformers() {
    let path = gguf("tiny-phi3");
    let c = load(&path).config;
    assert_eq!((c.head_dim, c.rotary_dim), (16, 12), "rope.dimension_count");
    assert_eq!(c.sliding_window, None, "the converter's 0 means none");
    check(&path, "tiny-phi3.json");
}

fn longrope_config(c: &ModelConfig) {
    let Some(RopeScaling::LongRope {
        short_factor,
        long_factor,
        original_max_position,
        attention_factor,
    }) = &c.rope_scaling
    else {
        panic!("expected LongRoPE, got {:?}", c.rope_scaling);
    };
    assert_eq!(*original_max_position, LONGROPE_ORIG);
    assert_eq!((short_factor.len(), long_factor.len()), (8, 8));
    assert_eq!((short_factor[7], long_factor[7]), (1.5, 24.0));
    assert!((attention_factor - std::f32::consts::SQRT_2).abs() < 1e-6);
    assert_eq!(c.rope_context_length, 256);
}

/// The long factors (every teacher-forced row; greedy where the prompt is past 16 tokens),
/// then the short ones (greedy steps whose sequence is within 16 tokens).
fn check_longrope(path: &Path) -> f32 {
    let label = name_of(path);
    let loaded = load(path);
    longrope_config(&loaded.config);
    let long = |p: &GoldenPrompt| match p.prompt_ids.len() > LONGROPE_ORIG {
        true => usize::MAX,
        false => 0,
    };
    let worst = check_with(loaded, "tiny-phi3-longrope.json", &label, true, &long);
    let short_model = load_model_using(path, &WithRopeContext(LONGROPE_ORIG)).expect("loads");
    // Step i (0-based) ran transformers on prompt_len + i tokens.
    let short = |p: &GoldenPrompt| (LONGROPE_ORIG + 1).saturating_sub(p.prompt_ids.len());
    let golden = read_golden("tiny-phi3-longrope.json");
    let short_steps: usize = golden.prompts.iter().map(short).sum();
    assert!(short_steps >= 4, "some greedy steps ran within 16 tokens");
    check_with(
        short_model,
        "tiny-phi3-longrope.json",
        &format!("{label} (short)"),
        false,
        &short,
    );
    worst
}

#[test]
fn tiny_phi3_longrope_hf_matches_transformers() {
    check_longrope(&hf("tiny-phi3-longrope"));
}

#[test]
fn tiny_phi3_longrope_gguf_matches_transformers() {
    let path = gguf("tiny-phi3-longrope");
    assert!(load(&path).config.tie_word_embeddings);
    check_longrope(&path);
}

/// The split views of the fused tensors are the right rows: HF's `qkv_proj` / `gate_up_proj`
/// parts and the GGUF's `attn_qkv` / `ffn_up` parts hold the same float16 bytes, and the parts
/// tile the fused tensor.
#[test]
fn fused_tensors_split_into_the_same_parts_in_both_formats() {
    let hf_loaded = load(&hf("tiny-phi3"));
    let c = hf_loaded.config.clone();
    let ckpt = kestrel_model::weights::safetensors::SafetensorsCheckpoint::open(&hf("tiny-phi3"))
        .expect("opens");
    let file = kestrel_model::weights::gguf::GgufFile::open(&gguf("tiny-phi3")).expect("opens");
    let hf_split = FusedSplit::new(&ckpt, &c, TensorNaming::HuggingFace);
    let gguf_split = FusedSplit::new(&file, &c, TensorNaming::Gguf);
    assert_eq!((hf_split.n_parts(), gguf_split.n_parts()), (15, 15));
    let (q, kv, ffn) = (64, 32, 128);
    for layer in 0..c.n_layers {
        let fused = ckpt
            .tensor(&format!("model.layers.{layer}.self_attn.qkv_proj.weight"))
            .expect("qkv_proj");
        assert_eq!(fused.shape, [q + 2 * kv, 64]);
        let mut tiled = Vec::new();
        for (t, rows) in [("q", q), ("k", kv), ("v", kv)] {
            let hf_name = format!("model.layers.{layer}.self_attn.{t}_proj.weight");
            let part = hf_split.tensor(&hf_name).expect("hf part");
            let g = gguf_split
                .tensor(&format!("blk.{layer}.attn_{t}.weight"))
                .expect("gguf part");
            assert_eq!(
                (part.shape.clone(), g.shape.clone()),
                (vec![rows, 64], vec![rows, 64])
            );
            assert_eq!(part.data[..], g.data[..], "layer {layer} {t}");
            tiled.extend_from_slice(&part.data);
        }
        assert_eq!(tiled[..], fused.data[..], "q, k, v tile qkv_proj");
        let gate_up = ckpt
            .tensor(&format!("model.layers.{layer}.mlp.gate_up_proj.weight"))
            .expect("gate_up_proj");
        let gate = hf_split
            .tensor(&format!("model.layers.{layer}.mlp.gate_proj.weight"))
            .expect("gate");
        let up = gguf_split
            .tensor(&format!("blk.{layer}.ffn_up.weight"))
            .expect("up");
        assert_eq!(
            (gate.shape.clone(), up.shape.clone()),
            (vec![ffn, 64], vec![ffn, 64])
        );
        assert_eq!(
            gate.data[..],
            gate_up.data[..gate.data.len()],
            "gate is the first half"
        );
        assert_eq!(
            up.data[..],
            gate_up.data[gate.data.len()..],
            "up is the second half"
        );
    }
    let names = gguf_split.tensor_names();
    assert!(names.contains(&"blk.0.attn_q.weight".to_string()));
    assert!(!names.contains(&"blk.0.attn_qkv.weight".to_string()));
}

/// Builds the model with LongRoPE's attention factor replaced by 1.
struct WithoutAttentionFactor;

impl BuildModel for WithoutAttentionFactor {
    type Error = ModelError;

    fn build(
        &self,
        config: &ModelConfig,
        weights: Weights<'_>,
    ) -> Result<DecoderModel, ModelError> {
        let mut config = config.clone();
        if let Some(RopeScaling::LongRope {
            attention_factor, ..
        }) = &mut config.rope_scaling
        {
            *attention_factor = 1.0;
        }
        let naming = weights.naming();
        DecoderModel::load(
            &config,
            &FusedSplit::new(weights.source(), &config, naming),
            naming,
        )
    }
}

/// The goldens see the rope details: without the attention factor, or with the short factors
/// on sequences transformers ran with the long ones, the logits move far past the tolerance.
#[test]
fn longrope_golden_detects_a_missing_attention_factor_or_the_wrong_factors() {
    let path = hf("tiny-phi3-longrope");
    let golden = read_golden("tiny-phi3-longrope.json");
    let p = golden
        .prompts
        .iter()
        .find(|p| p.name == "fox")
        .expect("fox");
    for (what, loaded) in [
        (
            "no attention factor",
            load_model_using(&path, &WithoutAttentionFactor),
        ),
        (
            "short factors",
            load_model_using(&path, &WithRopeContext(LONGROPE_ORIG)),
        ),
    ] {
        let mut runner = runner(loaded.expect("loads"), 256);
        let (logits, vocab) = teacher_forced_logits(&mut runner, &p.teacher_forced.ids);
        let err = compare(p, &logits, vocab, MARGIN).max_abs_err;
        assert!(err > 50.0 * LOGIT_TOL, "{what}: logits moved only {err}");
    }
}
