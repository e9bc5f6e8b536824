//! LoRA adapters on the tiny Llama checkpoint against PEFT (scripts/goldens/tiny_lora.py):
//! PEFT directories (F32, BF16, rsLoRA, all seven projections) and the same adapters as
//! llama.cpp LoRA GGUFs (F32, F16) must give PEFT's teacher-forced logits within the tiny
//! goldens' tolerance; an adapter with B = 0 gives the base logits exactly; a batch mixing three
//! adapters and the base gives every sequence what it gets alone.

use crate::common;

use common::*;
use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::executor::{BatchInput, SeqBatch};
use kestrel_model::ModelRunner;

/// The tiny goldens' tolerance (golden_tiny_llama.rs): f32 on both sides.
const LOGIT_TOL: f32 = 2e-3;
const MARGIN: f32 = 1e-2;

fn base_runner() -> ModelRunner {
    runner(load(&fixtures().join("tiny-llama-f32")), 256)
}

fn adapter_path(name: &str) -> std::path::PathBuf {
    fixtures().join("lora").join(name)
}

/// Every prompt of `golden` with adapter `file` must match PEFT; returns the largest error.
fn check_adapter(file: &str, golden: &str) -> f32 {
    let golden = read_golden(golden);
    let mut runner = base_runner();
    let id = runner
        .load_adapter(file, &adapter_path(file))
        .unwrap_or_else(|e| panic!("loading {file}: {e}"));
    let mut worst = 0.0f32;
    for p in &golden.prompts {
        let (logits, vocab) =
            teacher_forced_logits_with(&mut runner, &p.teacher_forced.ids, Some(id));
        let label = format!("lora {file}/{}", p.name);
        worst = worst.max(assert_logits_agree(
            &label, p, &logits, vocab, LOGIT_TOL, MARGIN,
        ));
    }
    worst
}

/// The adapter must change the logits (so that agreement is not the base's agreement).
fn assert_changes_base(name: &str) {
    let golden = read_golden(name);
    let mut runner = base_runner();
    let p = &golden.prompts[0];
    let (logits, vocab) = teacher_forced_logits(&mut runner, &p.teacher_forced.ids);
    let a = compare(p, &logits, vocab, MARGIN);
    assert!(
        a.max_abs_err > 0.05,
        "the base alone is within {} of {name}",
        a.max_abs_err
    );
}

#[test]
fn peft_all_seven_projections_match_peft() {
    assert_changes_base("tiny-llama-lora-all7.json");
    check_adapter("all7", "tiny-llama-lora-all7.json");
}

#[test]
fn peft_rslora_matches_peft() {
    assert_changes_base("tiny-llama-lora-rslora.json");
    check_adapter("rslora", "tiny-llama-lora-rslora.json");
}

#[test]
fn peft_bf16_adapter_matches_peft() {
    assert_changes_base("tiny-llama-lora-attn-bf16.json");
    check_adapter("attn-bf16", "tiny-llama-lora-attn-bf16.json");
}

#[test]
fn llama_cpp_gguf_adapter_matches_peft() {
    // Q/K deltas are stored in llama.cpp's row order and must be put back for the HF base.
    check_adapter("all7.gguf", "tiny-llama-lora-all7.json");
}

#[test]
fn llama_cpp_f16_gguf_of_rslora_adapter_matches_peft() {
    check_adapter("rslora.gguf", "tiny-llama-lora-rslora.json");
}

#[test]
fn adapter_with_zero_b_gives_exactly_the_base_logits() {
    let golden = read_golden("tiny-llama-f32.json");
    let mut runner = base_runner();
    let id = runner
        .load_adapter("zero", &adapter_path("zero"))
        .expect("loads");
    for p in &golden.prompts {
        let ids = &p.teacher_forced.ids;
        let (base, _) = teacher_forced_logits(&mut runner, ids);
        let (lora, _) = teacher_forced_logits_with(&mut runner, ids, Some(id));
        assert!(base == lora, "{}: a zero delta changed the logits", p.name);
    }
}

/// One sequence of a batch: its tokens, adapter and its own KV blocks.
fn seq(i: usize, tokens: &[u32], adapter: Option<AdapterId>) -> SeqBatch {
    let blocks = tokens.len().div_ceil(16);
    let first = (i * 8) as u32;
    SeqBatch {
        request_id: i as u64,
        tokens: tokens.to_vec(),
        start_pos: 0,
        block_table: (first..first + blocks as u32).collect(),
        num_logits: 1,
        adapter,
    }
}

#[test]
fn mixed_batch_gives_each_sequence_what_it_gets_alone() {
    let golden = read_golden("tiny-llama-f32.json");
    let mut runner = runner(load(&fixtures().join("tiny-llama-f32")), 16 * 8 * 5);
    let ids: Vec<Option<AdapterId>> = ["all7", "rslora.gguf", "attn-bf16"]
        .iter()
        .map(|n| Some(runner.load_adapter(n, &adapter_path(n)).expect("loads")))
        .collect();
    // all7, base, rslora, attn-bf16, all7 again: adapters interleave with the base.
    let plan = [ids[0], None, ids[1], ids[2], ids[0]];
    let prompts: Vec<&[u32]> = (0..plan.len())
        .map(|i| &golden.prompts[i % golden.prompts.len()].teacher_forced.ids[..])
        .map(|t| &t[..t.len().min(60)])
        .collect();
    let batch = BatchInput {
        seqs: (0..plan.len())
            .map(|i| seq(i, prompts[i], plan[i]))
            .collect(),
    };
    let mixed = runner.execute_all_logits(&batch).expect("runs");
    let vocab = mixed.vocab;
    let mut row = 0;
    let mut worst = 0.0f32;
    for (i, s) in batch.seqs.iter().enumerate() {
        let alone = runner
            .execute_all_logits(&BatchInput {
                seqs: vec![s.clone()],
            })
            .expect("runs");
        let n = s.tokens.len() * vocab;
        let together = &mixed.logits[row * vocab..row * vocab + n];
        let d = together
            .iter()
            .zip(&alone.logits)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!(
            "sequence {i} ({:?}): max |mixed - alone| = {d:e}",
            s.adapter
        );
        worst = worst.max(d);
        row += s.tokens.len();
    }
    assert!(
        worst <= 1e-6,
        "mixed batch differs from single runs by {worst}"
    );
}

#[test]
fn a_batch_naming_an_unloaded_adapter_is_refused() {
    let mut runner = base_runner();
    let id = runner
        .load_adapter("all7", &adapter_path("all7"))
        .expect("loads");
    assert!(matches!(
        runner.load_adapter("all7", &adapter_path("all7")),
        Err(kestrel_model::lora::LoraError::AlreadyLoaded(_))
    ));
    assert_eq!(runner.adapters_mut().unload("all7").expect("loaded"), id);
    let batch = BatchInput {
        seqs: vec![seq(0, &[1, 2, 3], Some(id))],
    };
    let err = runner.execute_all_logits(&batch).expect_err("refused");
    assert!(err.to_string().contains("not loaded"), "{err}");
    let again = runner
        .load_adapter("all7", &adapter_path("all7"))
        .expect("loads");
    assert_ne!(again, id, "ids are never reused");
}
