//! The real SmolLM2-135M-Instruct Q4_1 GGUF with a random rank-8 PEFT adapter (all seven
//! projections of layers 3 and 20, BF16) against PEFT on transformers' dequantized f32 model
//! (scripts/goldens/smollm2_lora.py). The base is a llama.cpp GGUF, so the adapter's Q/K rows
//! are put into llama.cpp's permuted order at load.
//!
//! Tolerance: that of golden_smollm2.rs (Kestrel quantizes activations to Q8_1 before the Q4_1
//! products, the reference multiplies in f32): `LOGIT_TOL` on the reference's top-20 logits of
//! every teacher-forced row, argmax equal where the reference margin exceeds `MARGIN`. The
//! adapter moves the reference's logits by 2 to 6 (recorded in the golden); the base alone must
//! be at least 1.5 times further from the adapter's reference than Kestrel with the adapter.

use crate::common;

use common::*;

const LOGIT_TOL: f32 = 2.0;
const MARGIN: f32 = 0.5;

#[test]
fn smollm2_with_rank8_adapter_matches_peft() {
    let golden = read_golden("smollm2-lora-r8.json");
    let mut runner = runner(load(&default_model_path()), 512);
    let adapter = fixtures().join("lora/smollm2-r8");
    let id = runner.load_adapter("r8", &adapter).expect("adapter loads");
    for p in &golden.prompts {
        let ids = &p.teacher_forced.ids;
        let (logits, vocab) = teacher_forced_logits_with(&mut runner, ids, Some(id));
        let label = format!("smollm2+lora/{}", p.name);
        let err = assert_logits_agree(&label, p, &logits, vocab, LOGIT_TOL, MARGIN);
        let (base, _) = teacher_forced_logits(&mut runner, ids);
        let without = compare(p, &base, vocab, MARGIN);
        eprintln!(
            "{}: without the adapter {:.3} from the reference, argmax differs at {} rows",
            p.name,
            without.max_abs_err,
            without.argmax_mismatches.len()
        );
        assert!(
            without.max_abs_err > 1.5 * err,
            "{}: the adapter's effect ({}) is not clearly above the quantization error ({err})",
            p.name,
            without.max_abs_err
        );
    }
}
