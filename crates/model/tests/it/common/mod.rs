//! Shared helpers for the golden tests: fixture paths, golden JSON parsing, teacher-forced runs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

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
            num_logits: 1,
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
                num_logits: 1,
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

/// Tolerances of the goldens on tiny random-weight checkpoints: absolute on the reference's
/// top-20 logits of every teacher-forced row, and the top-1/top-2 margin above which the
/// argmax must agree.
pub const TINY_LOGIT_TOL: f32 = 2e-3;
pub const TINY_MARGIN: f32 = 1e-2;

/// The file name of `path`, for messages.
pub fn file_label(path: &Path) -> String {
    path.file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned())
}

/// The tokenizer of `loaded` encodes every plain-text golden prompt to the reference's ids.
pub fn assert_prompt_ids(name: &str, loaded: &LoadedModel, golden: &Golden) {
    for p in golden.prompts.iter().filter(|p| p.kind != "chat_template") {
        let ids = loaded.tokenizer.encode(&p.text, true).expect("encodes");
        assert_eq!(ids, p.prompt_ids, "{name}/{}: prompt ids differ", p.name);
    }
}

/// Every golden prompt: teacher-forced logits agree within the tiny tolerances, and the greedy
/// continuation (prefill, then one token at a time through the KV cache) is equal. Returns the
/// largest logit difference.
pub fn assert_prompts_agree(name: &str, runner: &mut ModelRunner, golden: &Golden) -> f32 {
    let mut worst = 0.0f32;
    for p in &golden.prompts {
        let (logits, vocab) = teacher_forced_logits(runner, &p.teacher_forced.ids);
        let label = format!("{name}/{}", p.name);
        let err = assert_logits_agree(&label, p, &logits, vocab, TINY_LOGIT_TOL, TINY_MARGIN);
        let greedy = greedy_ids(runner, &p.prompt_ids, p.greedy.ids.len());
        assert_eq!(greedy, p.greedy.ids, "{label}: greedy continuation");
        worst = worst.max(err);
    }
    eprintln!("{name}: max |logit difference| over top-20 {worst:.2e}");
    worst
}

/// The tiny-checkpoint golden check of the model at `path`: architecture `arch`, prompt ids,
/// logits and greedy continuations against `golden`. Returns the runner (for further checks)
/// and the largest logit difference.
pub fn check_tiny_golden(path: &Path, golden: &str, arch: &str) -> (ModelRunner, f32) {
    let name = file_label(path);
    let golden = read_golden(golden);
    let loaded = load(path);
    assert_eq!(
        loaded.config.architecture.name(),
        arch,
        "{name}: architecture"
    );
    assert_prompt_ids(&name, &loaded, &golden);
    let mut runner = runner(loaded, 256);
    let worst = assert_prompts_agree(&name, &mut runner, &golden);
    (runner, worst)
}
