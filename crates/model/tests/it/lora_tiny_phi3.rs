//! A PEFT adapter on Phi-3's fused projections (`qkv_proj`, `gate_up_proj`, plus `o_proj` and
//! `down_proj`) on the tiny Phi-3 checkpoint, against PEFT (scripts/goldens/tiny_lora.py). The
//! fused B splits into the row blocks of the Q/K/V and gate/up views Kestrel runs, sharing A;
//! the same adapter runs on the HF checkpoint and on its llama.cpp GGUF.

use crate::common;

use common::*;

/// The tiny goldens' tolerance (golden_tiny_llama.rs): f32 on both sides.
const LOGIT_TOL: f32 = 2e-3;
const MARGIN: f32 = 1e-2;

fn check(base: &str) {
    let golden = read_golden("tiny-phi3-lora-fused.json");
    let mut runner = runner(load(&fixtures().join(base)), 256);
    let id = runner
        .load_adapter("fused", &fixtures().join("lora/phi3-fused"))
        .expect("adapter loads");
    let p = &golden.prompts[0];
    let (base_logits, vocab) = teacher_forced_logits(&mut runner, &p.teacher_forced.ids);
    let moved = compare(p, &base_logits, vocab, MARGIN).max_abs_err;
    assert!(
        moved > 0.05,
        "the base alone is within {moved} of the adapter's golden"
    );
    for p in &golden.prompts {
        let (logits, vocab) =
            teacher_forced_logits_with(&mut runner, &p.teacher_forced.ids, Some(id));
        assert_logits_agree(
            &format!("{base}+fused/{}", p.name),
            p,
            &logits,
            vocab,
            LOGIT_TOL,
            MARGIN,
        );
    }
}

#[test]
fn fused_phi3_adapter_on_hf_checkpoint_matches_peft() {
    check("tiny-phi3");
}

#[test]
fn fused_phi3_adapter_on_gguf_matches_peft() {
    check("tiny-phi3.gguf");
}
