//! Golden tests on the real SmolLM2-135M-Instruct Q4_1 GGUF against HF transformers (which
//! dequantizes the same file and computes in f32; see scripts/goldens/smollm2_goldens.py).
//!
//! Tolerance: Kestrel quantizes activations to 8-bit blocks (Q8_1) before the Q4_1 integer dot
//! products, as llama.cpp does, while the reference multiplies in f32. That rounding moves
//! logits by a few hundredths to a few tenths; we bound the absolute error on the reference's
//! top-20 logits of every teacher-forced row by `LOGIT_TOL`, and require the same argmax at every
//! row where the reference's top-1/top-2 margin exceeds `MARGIN`. The largest error over the
//! ~1,400 checked logits depends on which rounding decisions the 8-bit quantizer happens to
//! make, so any `f32` reordering upstream moves it: measured 1.28 (AVX-512), 1.41 (scalar) and
//! 1.93 (AVX2) on the chat prompt with the same code, hence 2.0.

use crate::common;

use common::*;

const LOGIT_TOL: f32 = 2.0;
const MARGIN: f32 = 0.5;

#[test]
fn teacher_forced_logits_match_transformers() {
    let golden = read_golden("smollm2.json");
    let loaded = load(&default_model_path());
    let mut runner = runner(loaded, 512);
    for p in &golden.prompts {
        let (logits, vocab) = teacher_forced_logits(&mut runner, &p.teacher_forced.ids);
        let a = compare(p, &logits, vocab, MARGIN);
        eprintln!(
            "{}: max |Δlogit| = {:.4} over top-20; {} clear rows, mismatches {:?}",
            p.name, a.max_abs_err, a.clear_rows, a.argmax_mismatches
        );
        assert!(
            a.max_abs_err < LOGIT_TOL,
            "{}: logits differ by {} (tolerance {LOGIT_TOL})",
            p.name,
            a.max_abs_err
        );
        assert!(
            a.argmax_mismatches.is_empty(),
            "{}: argmax differs at rows {:?}",
            p.name,
            a.argmax_mismatches
        );
        assert!(
            a.clear_rows > p.teacher_forced.ids.len() / 2,
            "{}: too few clear rows to be a meaningful check",
            p.name
        );
    }
}

/// Greedy decoding reproduces transformers' greedy continuation (32 tokens) of every golden
/// prompt up to its first near-tie: the continuations may part only by picking a token whose
/// reference logit is within `MARGIN` of the reference's top-1 (there the logit error of 8-bit
/// activation quantization, or a different `f32` summation order, can reorder them).
#[test]
fn greedy_continuations_follow_transformers_until_a_near_tie() {
    let golden = read_golden("smollm2.json");
    let mut runner = runner(load(&default_model_path()), 512);
    let mut agreed = 0;
    for p in &golden.prompts {
        let (tf, n) = (&p.teacher_forced, p.prompt_ids.len());
        let ours = greedy_ids(&mut runner, &p.prompt_ids, p.greedy.ids.len());
        let split = ours.iter().zip(&p.greedy.ids).position(|(a, b)| a != b);
        let same = split.unwrap_or(ours.len());
        eprintln!(
            "{}: first {same} of {} greedy tokens agree",
            p.name,
            ours.len()
        );
        agreed += same;
        if let Some(s) = split {
            // Row n - 1 + s of the teacher-forced run predicts greedy step s.
            let row = n - 1 + s;
            let gap = tf.topk_ids[row]
                .iter()
                .position(|&id| id == ours[s])
                .map(|k| tf.topk_logits[row][0] - tf.topk_logits[row][k]);
            assert!(
                gap.is_some_and(|g| g < MARGIN),
                "{}: greedy step {s} picks {}, which the reference ranks {gap:?} below its top-1",
                p.name,
                ours[s]
            );
        }
    }
    // The first near-ties come after 5, 18, 3, 2 and 0 tokens (plain, chat, code, digits, long).
    assert!(agreed >= 28, "only {agreed} greedy tokens agree in all");
}

#[test]
fn prompt_tokenization_matches_transformers() {
    let golden = read_golden("smollm2.json");
    let loaded = load(&default_model_path());
    for p in &golden.prompts {
        let ids = loaded.tokenizer.encode(&p.text, false).expect("encodes");
        assert_eq!(ids, p.prompt_ids, "{}: token ids differ", p.name);
    }
}
