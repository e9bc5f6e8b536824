//! Shared helpers for the golden tests: fixture paths, golden JSON parsing, teacher-forced runs.

#![allow(dead_code)]

use std::path::PathBuf;

use kestrel_engine::executor::{BatchInput, Executor, SeqBatch};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::{load_model, LoadedModel, ModelRunner};
use serde::Deserialize;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// The real default model; the test suite's script sets `KESTREL_DEFAULT_MODEL`.
pub fn default_model_path() -> PathBuf {
    let path = std::env::var_os("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL is not set: run the suite with scripts/test.sh, or set it to the SmolLM2 GGUF path (see `kestrel fetch`)",
    );
    PathBuf::from(path)
}

#[derive(Deserialize)]
pub struct Golden {
    pub prompts: Vec<GoldenPrompt>,
}

#[derive(Deserialize)]
pub struct GoldenPrompt {
    pub name: String,
    pub kind: String,
    pub text: String,
    pub prompt_ids: Vec<u32>,
    pub greedy: Greedy,
    pub teacher_forced: TeacherForced,
}

#[derive(Deserialize)]
pub struct Greedy {
    pub ids: Vec<u32>,
    pub text: String,
}

#[derive(Deserialize)]
pub struct TeacherForced {
    pub ids: Vec<u32>,
    pub top1: Vec<u32>,
    pub top2: Vec<u32>,
    pub margin: Vec<f32>,
    pub topk_ids: Vec<Vec<u32>>,
    pub topk_logits: Vec<Vec<f32>>,
}

pub fn read_golden(name: &str) -> Golden {
    let path = fixtures().join("goldens").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("golden JSON parses")
}

pub fn load(path: &std::path::Path) -> LoadedModel {
    load_model(path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// A runner with room for `tokens` positions in blocks of 16.
pub fn runner(loaded: LoadedModel, tokens: usize) -> ModelRunner {
    ModelRunner::new(loaded.model, 16, tokens.div_ceil(16), ThreadPool::global())
}

/// Logits of every position of `ids`, from one forward pass (`[ids.len(), vocab]`).
pub fn teacher_forced_logits(runner: &mut ModelRunner, ids: &[u32]) -> (Vec<f32>, usize) {
    teacher_forced_logits_with(runner, ids, None)
}

/// [`teacher_forced_logits`] with the sequence running LoRA adapter `adapter`.
pub fn teacher_forced_logits_with(
    runner: &mut ModelRunner,
    ids: &[u32],
    adapter: Option<kestrel_engine::adapter_id::AdapterId>,
) -> (Vec<f32>, usize) {
    let blocks = ids.len().div_ceil(16) as u32;
    let batch = BatchInput {
        seqs: vec![SeqBatch {
            request_id: 0,
            tokens: ids.to_vec(),
            start_pos: 0,
            block_table: (0..blocks).collect(),
            need_logits: true,
            adapter,
        }],
    };
    let out = runner
        .execute_all_logits(&batch)
        .expect("forward pass runs");
    (out.logits, out.vocab)
}

/// `n` greedy tokens after `prompt`: the prompt in one pass, then one token per step through
/// the KV cache (the runner needs room for `prompt.len() + n` positions).
pub fn greedy_ids(runner: &mut ModelRunner, prompt: &[u32], n: usize) -> Vec<u32> {
    let table: Vec<u32> = (0..(prompt.len() + n).div_ceil(16) as u32).collect();
    let (mut out, mut tokens, mut pos) = (Vec::new(), prompt.to_vec(), 0);
    while out.len() < n {
        let batch = BatchInput {
            seqs: vec![SeqBatch {
                request_id: 0,
                tokens: std::mem::take(&mut tokens),
                start_pos: pos,
                block_table: table.clone(),
                need_logits: true,
                adapter: None,
            }],
        };
        pos += batch.seqs[0].tokens.len();
        let logits = runner.execute(&batch).expect("forward pass runs");
        let next = argmax(logits.row(0));
        out.push(next);
        tokens.push(next);
    }
    out
}

/// Agreement of one prompt's teacher-forced logits with the reference.
pub struct Agreement {
    /// Largest |ours - reference| over the reference's top-k logits of every row.
    pub max_abs_err: f32,
    /// Rows whose reference margin exceeds the threshold, and how many of them disagree on top-1.
    pub clear_rows: usize,
    pub argmax_mismatches: Vec<usize>,
}

pub fn compare(p: &GoldenPrompt, logits: &[f32], vocab: usize, margin_threshold: f32) -> Agreement {
    let tf = &p.teacher_forced;
    let mut a = Agreement {
        max_abs_err: 0.0,
        clear_rows: 0,
        argmax_mismatches: Vec::new(),
    };
    for (i, (ids, refs)) in tf.topk_ids.iter().zip(&tf.topk_logits).enumerate() {
        let row = &logits[i * vocab..(i + 1) * vocab];
        for (id, r) in ids.iter().zip(refs) {
            a.max_abs_err = a.max_abs_err.max((row[*id as usize] - r).abs());
        }
        if tf.margin[i] > margin_threshold {
            a.clear_rows += 1;
            let ours = argmax(row);
            if ours != tf.top1[i] {
                a.argmax_mismatches.push(i);
            }
        }
    }
    a
}

/// Checks one prompt's teacher-forced logits against the reference: every top-k logit within
/// `tol`, the argmax equal on every row whose margin exceeds `margin`. Returns the largest
/// difference; `label` names the prompt in messages.
pub fn assert_logits_agree(
    label: &str,
    p: &GoldenPrompt,
    logits: &[f32],
    vocab: usize,
    tol: f32,
    margin: f32,
) -> f32 {
    let a = compare(p, logits, vocab, margin);
    eprintln!(
        "{label}: max |Δlogit| = {:.2e}; {} clear rows",
        a.max_abs_err, a.clear_rows
    );
    assert!(
        a.max_abs_err < tol,
        "{label}: logits differ by {}",
        a.max_abs_err
    );
    assert!(
        a.argmax_mismatches.is_empty(),
        "{label}: argmax differs at rows {:?}",
        a.argmax_mismatches
    );
    a.max_abs_err
}

pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}
