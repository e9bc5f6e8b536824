//! Golden tests on tiny random-weight HF Llama checkpoints (GQA 4/2, untied head) generated
//! with transformers (scripts/goldens/tiny_llama.py), in F32 and BF16 safetensors and with
//! llama3 RoPE scaling. Weights and activations are f32 on both sides (BF16 weights are exact
//! in f32), so the logits must agree to float rounding: `TINY_LOGIT_TOL` (tests/common) absolute on the reference's
//! top-20 logits of every teacher-forced row, and the argmax must agree wherever the
//! reference's top-1/top-2 margin exceeds `TINY_MARGIN`.

use crate::common;

use common::*;

fn check_checkpoint(dir: &str, golden: &str) {
    let golden = read_golden(golden);
    let loaded = load(&fixtures().join(dir));
    for p in golden.prompts.iter().filter(|p| p.kind != "chat_template") {
        let ids = loaded.tokenizer.encode(&p.text, true).expect("encodes");
        assert_eq!(
            ids, p.prompt_ids,
            "{dir}/{}: prompt ids differ from transformers",
            p.name
        );
    }
    let mut runner = runner(loaded, 256);
    for p in &golden.prompts {
        let (logits, vocab) = teacher_forced_logits(&mut runner, &p.teacher_forced.ids);
        let label = format!("{dir}/{}", p.name);
        assert_logits_agree(&label, p, &logits, vocab, TINY_LOGIT_TOL, TINY_MARGIN);
    }
}

#[test]
fn tiny_llama_f32_matches_transformers() {
    check_checkpoint("tiny-llama-f32", "tiny-llama-f32.json");
}

#[test]
fn tiny_llama_bf16_matches_transformers() {
    check_checkpoint("tiny-llama-bf16", "tiny-llama-bf16.json");
}

#[test]
fn tiny_llama_llama3_rope_scaling_matches_transformers() {
    check_checkpoint("tiny-llama-ropescale", "tiny-llama-ropescale.json");
}
