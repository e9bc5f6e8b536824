//! `convert`: HF ⇄ GGUF round trips. The tiny F32 fixture goes HF → GGUF → HF with every
//! tensor bit-identical and the same logits; the default model goes GGUF → HF (F32) → GGUF
//! and each step loads and agrees with the previous one.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_model::weights::safetensors::SafetensorsCheckpoint;
use kestrel_model::weights::TensorSource;
use kestrel_quant::convert::{gguf_to_hf, hf_to_gguf, FloatType};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-convert-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Logits of every position of `ids` for the model at `path`.
fn logits_of(path: &Path, ids: &[u32]) -> (Vec<f32>, usize) {
    let loaded = load(path);
    let mut r = runner(loaded, ids.len());
    teacher_forced_logits(&mut r, ids)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn tiny_hf_to_gguf_to_hf_is_lossless() {
    let src = fixtures().join("tiny-llama-f32");
    let dir = temp_dir("tiny");
    let gguf = dir.join("tiny.gguf");
    let plans = hf_to_gguf(&src, &gguf, FloatType::F32).expect("HF -> GGUF");
    assert_eq!(
        plans.len(),
        3 + 3 * 9,
        "embedding, final norm, untied head, 9 per layer"
    );
    let ids = load(&src)
        .tokenizer
        .encode("The quick brown fox jumps over the lazy dog.", true)
        .unwrap();
    let gguf_ids = load(&gguf)
        .tokenizer
        .encode("The quick brown fox jumps over the lazy dog.", true)
        .unwrap();
    assert_eq!(
        ids, gguf_ids,
        "the GGUF tokenizer metadata tokenizes like tokenizer.json"
    );
    let (hf_logits, vocab) = logits_of(&src, &ids);
    let (gguf_logits, _) = logits_of(&gguf, &ids);
    let d = max_abs_diff(&hf_logits, &gguf_logits);
    assert!(d < 1e-4, "HF vs GGUF logits differ by {d} (vocab {vocab})");

    let back = dir.join("hf");
    gguf_to_hf(&gguf, &back, FloatType::F32, &mut |_| {}).expect("GGUF -> HF");
    let (a, b) = (
        SafetensorsCheckpoint::open(&src).unwrap(),
        SafetensorsCheckpoint::open(&back).unwrap(),
    );
    let mut names = a.tensor_names();
    names.sort();
    let mut back_names = b.tensor_names();
    back_names.sort();
    assert_eq!(names, back_names);
    for name in &names {
        let (x, y) = (a.tensor(name).unwrap(), b.tensor(name).unwrap());
        assert_eq!(x.shape, y.shape, "{name}");
        assert!(
            x.data[..] == y.data[..],
            "{name}: bytes differ after HF -> GGUF -> HF"
        );
    }
    assert_eq!(load(&src).config.rope_theta, load(&back).config.rope_theta);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn default_model_gguf_to_hf_and_back_agree() {
    let model = default_model_path();
    let dir = temp_dir("default");
    let hf = dir.join("hf");
    gguf_to_hf(&model, &hf, FloatType::F32, &mut |_| {}).expect("GGUF -> HF");
    let text = "The capital of France is Paris. It is known for";
    let ids = load(&model).tokenizer.encode(text, true).unwrap();
    assert_eq!(
        load(&hf).tokenizer.encode(text, true).unwrap(),
        ids,
        "tokenizer.json tokenizes like the GGUF"
    );
    let (orig, _) = logits_of(&model, &ids);
    let (hf_logits, _) = logits_of(&hf, &ids);
    // The Q4_1 original multiplies 8-bit-quantized activations, the F32 copy f32 ones: they
    // differ by that activation rounding (the bound golden_smollm2.rs uses), not by conversion.
    let d = max_abs_diff(&orig, &hf_logits);
    eprintln!("Q4_1 GGUF vs dequantized F32 HF: max |Δlogit| = {d}");
    assert!(d < 1.5, "logits differ by {d}");
    // transformers computed these goldens in f32 from the dequantized GGUF: the F32 HF copy
    // must reproduce them to float rounding.
    let mut runner = runner(load(&hf), 512);
    for p in &read_golden("smollm2.json").prompts {
        let (logits, vocab) = teacher_forced_logits(&mut runner, &p.teacher_forced.ids);
        let a = compare(p, &logits, vocab, 0.05);
        eprintln!(
            "{}: max |Δlogit| vs transformers = {:.2e}",
            p.name, a.max_abs_err
        );
        assert!(
            a.max_abs_err < 0.02,
            "{}: converted model differs from transformers by {}",
            p.name,
            a.max_abs_err
        );
        assert!(
            a.argmax_mismatches.is_empty(),
            "{}: argmax differs at rows {:?}",
            p.name,
            a.argmax_mismatches
        );
    }
    let gguf = dir.join("back.gguf");
    hf_to_gguf(&hf, &gguf, FloatType::F32).expect("HF -> GGUF");
    let (back, _) = logits_of(&gguf, &ids);
    let d = max_abs_diff(&hf_logits, &back);
    assert!(d < 1e-3, "F32 HF vs F32 GGUF logits differ by {d}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// GGUF → HF writes a family's own config dialect only where convert handles the family: a
/// Qwen2 GGUF (biases on q/k/v only) is refused rather than written out as a Llama that would
/// load with the wrong biases.
#[test]
fn gguf_to_hf_refuses_a_family_it_does_not_convert() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen2.gguf");
    let dir = temp_dir("qwen2");
    let err = gguf_to_hf(&model, &dir.join("hf"), FloatType::F32, &mut |_| {})
        .expect_err("qwen2 is not converted to HF");
    assert!(
        err.to_string()
            .contains("architecture qwen2 (convert handles"),
        "{err}"
    );
}
