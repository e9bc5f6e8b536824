//! DeepSeek's two ways to attend (see `kestrel_model::arch::latent_prefill`): a long prefill
//! chunk expands the cached latents through `kv_b` into per-head keys and values and runs the
//! ordinary tiled attention; decode and short chunks attend over the latents with absorbed
//! queries. On the tiny DeepSeek checkpoints (HF and GGUF):
//!
//! * the goldens hold with every prefill expanded (greedy decode steps absorbed);
//! * both paths give the same logits on the same chunks, within [`PATH_TOL`]: a whole prompt,
//!   a chunk after a cached prefix (the expansion reads the cached keys too), and a batch that
//!   mixes an expanded chunk with absorbed ones.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_engine::executor::{BatchInput, SeqBatch};
use kestrel_model::ModelRunner;

/// Largest |logit difference| allowed between the paths: the same f32 arithmetic in another
/// order (the tiny models' logits are of order 1; observed differences are about 1e-6).
const PATH_TOL: f32 = 1e-4;

const FILES: [(&str, &str); 4] = [
    ("tiny-deepseek-v2", "tiny-deepseek-v2.json"),
    ("tiny-deepseek-v2.gguf", "tiny-deepseek-v2.json"),
    ("tiny-deepseek-v3", "tiny-deepseek-v3.json"),
    ("tiny-deepseek-v3.gguf", "tiny-deepseek-v3.json"),
];

fn path(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// A runner for `path` whose chunks of at least `min_tokens` take the expanded path.
fn runner_with(path: &Path, min_tokens: usize) -> ModelRunner {
    let mut loaded = load(path);
    loaded.model.set_latent_prefill_min_tokens(min_tokens);
    runner(loaded, 256)
}

#[test]
fn goldens_hold_with_every_prefill_expanded() {
    for (file, golden) in FILES {
        let mut r = runner_with(&path(file), 2);
        let golden = read_golden(golden);
        assert_prompts_agree(&format!("{file} (expanded prefill)"), &mut r, &golden);
    }
}

/// 48 token ids spread over the vocabulary.
fn ids(vocab: usize) -> Vec<u32> {
    (0..48).map(|i| ((i * 37 + 11) % vocab) as u32).collect()
}

fn one_seq(request_id: u64, tokens: &[u32], start_pos: usize, table: &[u32]) -> SeqBatch {
    SeqBatch {
        request_id,
        tokens: tokens.to_vec(),
        start_pos,
        block_table: table.to_vec(),
        num_logits: tokens.len(),
        adapter: None,
    }
}

/// Logits of every token of `seqs` run as one batch.
fn run(r: &mut ModelRunner, seqs: Vec<SeqBatch>) -> Vec<f32> {
    r.execute_all_logits(&BatchInput { seqs })
        .expect("forward pass runs")
        .logits
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn both_paths_agree_on_a_whole_prompt_and_on_a_chunk_after_a_cached_prefix() {
    for (file, _) in FILES {
        let (mut expanded, mut absorbed) = (
            runner_with(&path(file), 1),
            runner_with(&path(file), usize::MAX),
        );
        let vocab = load(&path(file)).config.vocab_size;
        let ids = ids(vocab);
        let table: Vec<u32> = (0..4).collect();
        let whole = |r: &mut ModelRunner| run(r, vec![one_seq(0, &ids, 0, &table)]);
        let d = max_diff(&whole(&mut expanded), &whole(&mut absorbed));
        eprintln!("{file}: whole prompt, paths differ by {d:.2e}");
        assert!(d < PATH_TOL, "{file}: whole prompt, paths differ by {d}");
        // The first 20 tokens absorbed into the cache of both, then 28 more by each path.
        let mut prefix = runner_with(&path(file), usize::MAX);
        run(&mut prefix, vec![one_seq(0, &ids[..20], 0, &table)]);
        let tail = |r: &mut ModelRunner, n: usize| {
            r.model_mut().set_latent_prefill_min_tokens(n);
            run(r, vec![one_seq(0, &ids[20..], 20, &table)])
        };
        let e = tail(&mut prefix, 1);
        let a = tail(&mut prefix, usize::MAX);
        let d = max_diff(&e, &a);
        eprintln!("{file}: chunk after 20 cached tokens, paths differ by {d:.2e}");
        assert!(
            d < PATH_TOL,
            "{file}: chunk after a prefix, paths differ by {d}"
        );
    }
}

/// One batch of an expanded 30-token prompt, a decode token after 10 cached tokens and a
/// 5-token absorbed chunk: each sequence's logits are those of its own all-absorbed run.
#[test]
fn a_batch_mixing_the_paths_gives_each_sequence_its_own_logits() {
    let file = "tiny-deepseek-v3.gguf";
    let vocab = load(&path(file)).config.vocab_size;
    let ids = ids(vocab);
    let (a, b, c) = (&ids[..30], &ids[30..41], &ids[41..46]);
    let (ta, tb, tc): (Vec<u32>, Vec<u32>, Vec<u32>) = (vec![0, 1], vec![2], vec![3]);
    let mut alone = runner_with(&path(file), usize::MAX);
    let want_a = run(&mut alone, vec![one_seq(0, a, 0, &ta)]);
    run(&mut alone, vec![one_seq(1, &b[..10], 0, &tb)]);
    let want_b = run(&mut alone, vec![one_seq(1, &b[10..], 10, &tb)]);
    let want_c = run(&mut alone, vec![one_seq(2, c, 0, &tc)]);

    let mut mixed = runner_with(&path(file), 16);
    run(&mut mixed, vec![one_seq(1, &b[..10], 0, &tb)]);
    let got = run(
        &mut mixed,
        vec![
            one_seq(0, a, 0, &ta),
            one_seq(1, &b[10..], 10, &tb),
            one_seq(2, c, 0, &tc),
        ],
    );
    let (got_a, rest) = got.split_at(30 * vocab);
    let (got_b, got_c) = rest.split_at(vocab);
    for (name, got, want) in [
        ("a", got_a, &want_a),
        ("b", got_b, &want_b),
        ("c", got_c, &want_c),
    ] {
        let d = max_diff(got, want);
        eprintln!("mixed batch, sequence {name}: differs by {d:.2e}");
        assert!(d < PATH_TOL, "mixed batch, sequence {name}: differs by {d}");
    }
}
