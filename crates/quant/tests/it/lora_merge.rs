//! LoRA adapters on a GGUF base and merged into converted weights, against PEFT's logits
//! (scripts/goldens/tiny_lora.py): the tiny Llama as GGUF (Q/K rows in llama.cpp's order) runs
//! the PEFT and the llama.cpp adapter at run time; `convert --merge-lora` folds an adapter into
//! the weights in both directions (HF → GGUF, GGUF → HF), and the merged model alone gives the
//! adapter's logits.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_quant::convert::{gguf_to_hf_merged, hf_to_gguf, hf_to_gguf_merged, FloatType};

/// The tiny goldens' tolerance (golden_tiny_llama.rs).
const LOGIT_TOL: f32 = 2e-3;
const MARGIN: f32 = 1e-2;
const GOLDEN: &str = "tiny-llama-lora-all7.json";

fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kestrel-lora-merge-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn adapter(name: &str) -> PathBuf {
    fixtures().join("lora").join(name)
}

/// The model at `path` (with `lora` loaded at run time, if given) against the all7 golden.
fn check(label: &str, path: &Path, lora: Option<&Path>) {
    let golden = read_golden(GOLDEN);
    let mut r = runner(load(path), 256);
    let id = lora.map(|l| r.load_adapter("a", l).expect("adapter loads"));
    for p in &golden.prompts {
        let (logits, vocab) = teacher_forced_logits_with(&mut r, &p.teacher_forced.ids, id);
        assert_logits_agree(
            &format!("{label}/{}", p.name),
            p,
            &logits,
            vocab,
            LOGIT_TOL,
            MARGIN,
        );
    }
}

#[test]
fn gguf_base_runs_peft_and_llama_cpp_adapters() {
    let dir = temp_dir("base");
    let gguf = dir.join("tiny.gguf");
    hf_to_gguf(&fixtures().join("tiny-llama-f32"), &gguf, FloatType::F32).expect("HF -> GGUF");
    check("gguf base + peft", &gguf, Some(&adapter("all7")));
    check("gguf base + gguf lora", &gguf, Some(&adapter("all7.gguf")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn merged_hf_to_gguf_gives_the_adapter_logits() {
    let dir = temp_dir("to-gguf");
    let gguf = dir.join("merged.gguf");
    let src = fixtures().join("tiny-llama-f32");
    hf_to_gguf_merged(&src, &gguf, FloatType::F32, Some(&adapter("all7"))).expect("merge");
    check("merged gguf", &gguf, None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn merged_gguf_to_hf_gives_the_adapter_logits() {
    let dir = temp_dir("to-hf");
    let gguf = dir.join("tiny.gguf");
    hf_to_gguf(&fixtures().join("tiny-llama-f32"), &gguf, FloatType::F32).expect("HF -> GGUF");
    let hf = dir.join("merged");
    gguf_to_hf_merged(
        &gguf,
        &hf,
        FloatType::F32,
        Some(&adapter("all7.gguf")),
        &mut |_| {},
    )
    .expect("merge");
    check("merged hf", &hf, None);
    std::fs::remove_dir_all(&dir).unwrap();
}
