//! The engine's sliding-window block release on a real (tiny, random-weight) model.
//!
//! tiny-qwen2-swa has a window of 8 on layers 1-2 and full attention on layer 0; its runner
//! reports no bounding window, so nothing is released. A copy of it whose config puts the window
//! on every layer (same weights) is the all-window case: it reports a window of 8, and a
//! scheduler that releases blocks out of the window produces exactly the logits of one that
//! keeps every block (same chunks, so the same arithmetic: only the physical blocks differ),
//! while holding at most 3 blocks of 4 between steps, for a context longer than the pool.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_engine::config::EngineConfig;
use kestrel_engine::executor::Executor;
use kestrel_engine::kv::NO_BLOCK;
use kestrel_engine::request::{Request, RequestParams};
use kestrel_engine::scheduler::{Scheduler, SchedulerConfig};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::ModelRunner;

const BS: usize = 4;
const WINDOW: usize = 8;
/// Tokens per step: prompts run in chunks of this size in every run compared.
const CHUNK: usize = 14;

/// A copy of tiny-qwen2-swa whose every layer slides (window 8), in a temp directory named
/// after `tag`.
fn all_window_copy(tag: &str) -> PathBuf {
    let src = fixtures().join("tiny-qwen2-swa");
    let dir = std::env::temp_dir().join(format!("kestrel-all-window-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for entry in std::fs::read_dir(&src).expect("fixture dir") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().expect("file name");
        std::fs::copy(&path, dir.join(name)).expect("copy fixture file");
    }
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).expect("config");
    let mut cfg: serde_json::Value = serde_json::from_str(&text).expect("config JSON");
    let n = cfg["num_hidden_layers"].as_u64().expect("layer count") as usize;
    cfg["layer_types"] = serde_json::json!(vec!["sliding_attention"; n]);
    cfg["max_window_layers"] = serde_json::json!(0);
    std::fs::write(&cfg_path, cfg.to_string()).expect("write config");
    dir
}

fn runner_at(path: &Path, num_blocks: usize) -> ModelRunner {
    ModelRunner::new(load(path).model, BS, num_blocks, ThreadPool::global())
}

/// The scheduler the engine would build over `runner`, with `CHUNK` tokens per step.
fn scheduler_config(runner: &ModelRunner) -> SchedulerConfig {
    let engine = EngineConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: CHUNK,
        enable_prefix_caching: true,
        max_model_len: 256,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    engine.scheduler_config(runner.kv_geometry())
}

/// What one greedy run produced.
struct Run {
    tokens: Vec<u32>,
    /// The logits row of every sampled token, in order.
    logits: Vec<Vec<f32>>,
    /// Most blocks the request held between steps.
    peak_blocks: usize,
}

/// Greedy generation of `max_tokens` after `prompt`, scheduled by a scheduler over `cfg`.
fn generate(
    runner: &mut ModelRunner,
    cfg: SchedulerConfig,
    prompt: &[u32],
    max_tokens: usize,
) -> Run {
    let mut s = Scheduler::new(cfg).expect("valid scheduler config");
    let mut p = RequestParams::new(max_tokens);
    p.ignore_eos = true;
    s.add_request(Request::new(1, prompt.to_vec(), p))
        .expect("prompt accepted");
    let mut run = Run {
        tokens: Vec::new(),
        logits: Vec::new(),
        peak_blocks: 0,
    };
    while s.has_unfinished() {
        let out = s.schedule();
        let logits = runner.execute(&out.batch).expect("forward pass runs");
        let sampled: Vec<u32> = (0..logits.num_rows())
            .map(|i| argmax(logits.row(i)))
            .collect();
        run.logits
            .extend((0..logits.num_rows()).map(|i| logits.row(i).to_vec()));
        for o in s.update(&out, &sampled).expect("update") {
            run.tokens.push(o.token);
            if let Some(reason) = o.stop {
                s.finish(o.request_id, reason);
            }
        }
        if let Some(r) = s.request(1) {
            let held = r.block_table().iter().filter(|&&b| b != NO_BLOCK).count();
            run.peak_blocks = run.peak_blocks.max(held);
        }
    }
    let kv = s.kv();
    assert_eq!(kv.num_free_blocks(), kv.num_blocks(), "blocks leaked");
    kv.pool().check_invariants().expect("pool invariants");
    run
}

#[test]
fn mixed_window_model_reports_no_bounding_window() {
    let loaded = load(&fixtures().join("tiny-qwen2-swa"));
    let windows: Vec<_> = (0..3).map(|l| loaded.config.layer_window(l)).collect();
    assert_eq!(windows, vec![None, Some(8), Some(8)]);
    let runner = runner_at(&fixtures().join("tiny-qwen2-swa"), 16);
    assert_eq!(runner.kv_geometry().attention_window, None);
    let cfg = scheduler_config(&runner);
    let s = Scheduler::new(cfg).expect("valid");
    assert_eq!(
        s.max_model_len(),
        16 * BS,
        "a global layer keeps the context in the pool"
    );
}

#[test]
fn all_window_model_releases_blocks_with_identical_logits() {
    let dir = all_window_copy("release");
    let prompt: Vec<u32> = (0..40u32).map(|i| (i * 37 + 11) % 384).collect();
    let new_tokens = 60;

    // Releasing: 6 blocks of 4 hold 24 tokens, less than the 40-token prompt.
    let mut small = runner_at(&dir, 6);
    assert_eq!(small.kv_geometry().attention_window, Some(WINDOW));
    let cfg = scheduler_config(&small);
    assert_eq!(Scheduler::new(cfg).expect("valid").max_model_len(), 256);
    let released = generate(&mut small, cfg, &prompt, new_tokens);

    // Keeping every block: a pool for the whole context, release off.
    let mut big = runner_at(&dir, 32);
    let keep = SchedulerConfig {
        attention_window: None,
        ..scheduler_config(&big)
    };
    let kept = generate(&mut big, keep, &prompt, new_tokens);
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(released.tokens.len(), new_tokens);
    assert_eq!(released.tokens, kept.tokens);
    assert_eq!(released.logits.len(), kept.logits.len());
    for (i, (a, b)) in released.logits.iter().zip(&kept.logits).enumerate() {
        assert_eq!(a, b, "logits row {i}");
    }
    assert_eq!(
        released.peak_blocks, 3,
        "ceil(7 / 4) + 1 blocks between steps"
    );
    assert_eq!(kept.peak_blocks, (40 + new_tokens - 1).div_ceil(BS));
    eprintln!(
        "blocks held between steps: {} releasing, {} keeping every block",
        released.peak_blocks, kept.peak_blocks
    );
}

#[test]
fn the_window_changes_this_models_output() {
    // Guards the test above against a window too wide to matter: the all-window model and the
    // mixed one (layer 0 global) disagree on the last positions of the same long prompt.
    let dir = all_window_copy("differs");
    let prompt: Vec<u32> = (0..40u32).map(|i| (i * 37 + 11) % 384).collect();
    let (all, vocab) = teacher_forced_logits(&mut runner(load(&dir), 64), &prompt);
    let mixed_model = load(&fixtures().join("tiny-qwen2-swa"));
    let (mixed, _) = teacher_forced_logits(&mut runner(mixed_model, 64), &prompt);
    let _ = std::fs::remove_dir_all(&dir);
    let last = (prompt.len() - 1) * vocab;
    let diff = all[last..]
        .iter()
        .zip(&mixed[last..])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff > 1e-2, "largest logit difference {diff}");
    // Within the window (the first 8 positions) the two models agree.
    let early = all[..8 * vocab]
        .iter()
        .zip(&mixed[..8 * vocab])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(early < 1e-5, "first 8 positions differ by {early}");
}
