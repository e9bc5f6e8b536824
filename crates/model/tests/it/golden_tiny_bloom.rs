//! Golden tests on a tiny random-weight BLOOM checkpoint generated with transformers
//! (scripts/goldens/tiny_bloom.py), run from the HF directory (config.json + float32
//! safetensors, fused `query_key_value` rows interleaved per head) and from the GGUF that
//! llama.cpp's convert_hf_to_gguf.py made of it (f32, the same weights; `attn_qkv` rows
//! regrouped into `[q; k; v]`).
//!
//! tiny-bloom: 6 heads of 8 (not a power of two: ALiBi slopes 1/4, 1/16, 1/64, 1/256 then 1/2,
//! 1/8), hidden 48, 2 layers, LayerNorm with biases (the embedding's too), a GELU MLP with
//! biases, tied LM head, no rotary. The long prompt (91 tokens + 16 generated) makes the
//! position biases span up to 100 positions.
//!
//! Tolerances as golden_tiny_qwen.rs: `TINY_LOGIT_TOL` (tests/common) absolute on the reference's top-20 logits of
//! every teacher-forced row, the argmax equal wherever the reference's top-1/top-2 margin
//! exceeds `TINY_MARGIN`, and the greedy continuation (prompt prefill, then one token at a time
//! through the KV cache) equal to transformers'. ALiBi adds biases from absolute positions, so
//! chunked prefill (a later chunk attending to cached keys, as after a prefix-cache hit) must
//! give the logits of one prefill: checked too.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use kestrel_engine::executor::{BatchInput, SeqBatch};
use kestrel_model::config::PositionEncoding;
use kestrel_model::ModelFormat;

fn hf() -> PathBuf {
    fixtures().join("tiny-bloom")
}

fn gguf() -> PathBuf {
    fixtures().join("tiny-bloom.gguf")
}

/// Run the model at `path` against the golden; returns the largest logit difference.
fn check(path: &Path) -> f32 {
    let name = file_label(path);
    let golden = read_golden("tiny-bloom.json");
    let loaded = load(path);
    let c = &loaded.config;
    assert_eq!(c.architecture.name(), "bloom", "{name}");
    assert_eq!(
        (c.n_heads, c.n_kv_heads, c.head_dim, c.hidden_size),
        (6, 6, 8, 48)
    );
    assert_eq!((c.intermediate_size, c.n_layers), (192, 2));
    assert!(c.tie_word_embeddings && c.attention_bias);
    assert!(matches!(
        c.architecture.layout().positions,
        PositionEncoding::Alibi(a) if a.max_bias == 8.0
    ));
    assert_prompt_ids(&name, &loaded, &golden);
    assert_prompts_agree(&name, &mut runner(loaded, 256), &golden)
}

#[test]
fn tiny_bloom_hf_matches_transformers() {
    let loaded = load(&hf());
    assert_eq!(loaded.format, ModelFormat::Safetensors);
    check(&hf());
}

#[test]
fn tiny_bloom_gguf_matches_transformers() {
    let loaded = load(&gguf());
    assert_eq!(loaded.format, ModelFormat::Gguf);
    assert_eq!(loaded.config.max_position_embeddings, 256);
    check(&gguf());
}

/// Every logit row of `ids` run as the chunks `cuts` delimit (each chunk after the first
/// attends to the keys its predecessors left in the cache).
fn chunked_logits(path: &Path, ids: &[u32], cuts: &[usize]) -> Vec<f32> {
    let mut runner = runner(load(path), 256);
    let table: Vec<u32> = (0..ids.len().div_ceil(16) as u32).collect();
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(ids.len());
    let mut logits = Vec::new();
    for w in bounds.windows(2) {
        let batch = BatchInput {
            seqs: vec![SeqBatch {
                request_id: 0,
                tokens: ids[w[0]..w[1]].to_vec(),
                start_pos: w[0],
                block_table: table.clone(),
                num_logits: 1,
                adapter: None,
            }],
        };
        let out = runner
            .execute_all_logits(&batch)
            .expect("forward pass runs");
        logits.extend_from_slice(&out.logits);
    }
    logits
}

#[test]
fn tiny_bloom_chunked_prefill_equals_one_prefill() {
    let golden = read_golden("tiny-bloom.json");
    let p = golden
        .prompts
        .iter()
        .find(|p| p.name == "long")
        .expect("long prompt");
    let ids = &p.teacher_forced.ids;
    for path in [hf(), gguf()] {
        let whole = chunked_logits(&path, ids, &[]);
        for cuts in [&[32, 64][..], &[7, 23, 50, 99][..]] {
            let chunked = chunked_logits(&path, ids, cuts);
            assert_eq!(chunked.len(), whole.len());
            let worst = whole
                .iter()
                .zip(&chunked)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                worst <= 1e-4,
                "{}: chunks {cuts:?} differ from one prefill by {worst}",
                path.display()
            );
        }
    }
}

/// The two sources hold the same weights: their logits agree far inside the golden tolerance.
#[test]
fn tiny_bloom_hf_and_gguf_agree() {
    let golden = read_golden("tiny-bloom.json");
    let ids = &golden.prompts[1].teacher_forced.ids;
    let (a, _) = teacher_forced_logits(&mut runner(load(&hf()), 256), ids);
    let (b, _) = teacher_forced_logits(&mut runner(load(&gguf()), 256), ids);
    let worst = a
        .iter()
        .zip(&b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(worst <= 1e-4, "HF vs GGUF: {worst}");
}
