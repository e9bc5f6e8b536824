//! Golden tests on the real Gemma 3 270M base model (gemma-3-270m-q4_k_m.gguf: Q4_K, Q5_0,
//! Q6_K and Q8_0 tensors) against transformers' Gemma3ForCausalLM on the same file's
//! dequantized weights (scripts/goldens/gemma3_270m_goldens.py). The file is fetched by
//! scripts/fetch_gemma3_270m.sh, which scripts/test.sh runs and whose path it exports as
//! `KESTREL_GEMMA3_270M`; without it these tests fail and say so.
//!
//! Prompt ids come from llama.cpp's llama-tokenize on the same file; Kestrel's SentencePiece
//! tokenizer must reproduce them. Tolerances as golden_smollm2.rs: Kestrel quantizes
//! activations to 8 bits before the quantized dot products (as llama.cpp does) while the
//! reference multiplies in f32, so logits move by up to a few tenths: `LOGIT_TOL` absolute on
//! the reference's top-20 logits of every row, the argmax equal where the margin exceeds
//! `MARGIN`, greedy continuations equal up to the first near-tie.

use crate::common;

use std::path::PathBuf;

use common::*;

const LOGIT_TOL: f32 = 2.0;
const MARGIN: f32 = 0.5;

fn model_path() -> PathBuf {
    let path = std::env::var_os("KESTREL_GEMMA3_270M").expect(
        "KESTREL_GEMMA3_270M is not set: run the suite with scripts/test.sh, or set it to the path scripts/fetch_gemma3_270m.sh prints",
    );
    PathBuf::from(path)
}

#[test]
fn gemma3_270m_config_is_read_like_llama_cpp() {
    let c = load(&model_path()).config;
    assert_eq!(c.architecture.name(), "gemma3");
    assert_eq!(
        (c.n_layers, c.hidden_size, c.head_dim, c.vocab_size),
        (18, 640, 256, 262_144)
    );
    let global: Vec<usize> = (0..18).filter(|&l| c.layer_window(l).is_none()).collect();
    assert_eq!(global, [5, 11, 17], "every 6th layer is global");
    assert_eq!(c.layer_window(0), Some(512));
    let g = c.gemma.as_ref().expect("Gemma features");
    assert_eq!((c.rope_theta, g.local_rope_theta), (1e6, 1e4));
    assert_eq!(g.attention_scale, 1.0 / 16.0);
    assert_eq!(c.bos_token_id, Some(2));
}

#[test]
fn gemma3_270m_prompt_ids_match_llama_cpp() {
    let golden = read_golden("gemma3-270m.json");
    let loaded = load(&model_path());
    for p in &golden.prompts {
        let ids = loaded.tokenizer.encode(&p.text, true).expect("encodes");
        assert_eq!(ids, p.prompt_ids, "{}: token ids differ", p.name);
    }
}

#[test]
fn gemma3_270m_logits_match_transformers() {
    let golden = read_golden("gemma3-270m.json");
    let mut runner = runner(load(&model_path()), 256);
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
    }
}

#[test]
fn gemma3_270m_greedy_follows_transformers_until_a_near_tie() {
    let golden = read_golden("gemma3-270m.json");
    let mut runner = runner(load(&model_path()), 256);
    for p in &golden.prompts {
        let (tf, n) = (&p.teacher_forced, p.prompt_ids.len());
        let ours = greedy_ids(&mut runner, &p.prompt_ids, p.greedy.ids.len());
        let split = ours.iter().zip(&p.greedy.ids).position(|(a, b)| a != b);
        eprintln!(
            "{}: first {} of {} greedy tokens agree",
            p.name,
            split.unwrap_or(ours.len()),
            ours.len()
        );
        if let Some(s) = split {
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
}
