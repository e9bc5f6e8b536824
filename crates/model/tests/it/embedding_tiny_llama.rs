//! Embeddings against transformers on the tiny random-weight HF Llama
//! (tests/fixtures/tiny-llama-f32; goldens from scripts/goldens/tiny_llama_embeddings.py).
//!
//! Pooling is the last token's final hidden state (after the final norm), L2-normalised:
//! transformers' `model.model(ids).last_hidden_state[0, -1]` normalised. Weights and
//! activations are f32 on both sides, so every component of the unit vectors must agree within
//! `EMBED_TOL` (1e-4 absolute) and their cosine must exceed 1 - 1e-6. Through the engine, an
//! embedding gives the same vector and leaves every KV block free.

use crate::common;

use std::sync::Arc;

use common::*;
use kestrel_engine::config::EngineConfig;
use kestrel_engine::executor::{BatchInput, Executor, SeqBatch};
use kestrel_engine::handle::EngineHandle;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::ModelRunner;
use serde::Deserialize;

const EMBED_TOL: f32 = 1e-4;

#[derive(Deserialize)]
struct EmbeddingGolden {
    prompts: Vec<EmbeddingPrompt>,
}

#[derive(Deserialize)]
struct EmbeddingPrompt {
    text: String,
    prompt_ids: Vec<u32>,
    embedding: Vec<f32>,
}

fn golden() -> EmbeddingGolden {
    let path = fixtures().join("goldens/tiny-llama-f32-embeddings.json");
    let text = std::fs::read_to_string(&path).expect("embedding golden");
    serde_json::from_str(&text).expect("golden JSON")
}

fn l2_normalised(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

fn assert_close(label: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{label}: width");
    let max = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let cos: f32 = got.iter().zip(want).map(|(a, b)| a * b).sum();
    eprintln!("{label}: max abs diff {max:e}, cosine {cos}");
    assert!(max <= EMBED_TOL, "{label}: max abs diff {max}");
    assert!(cos > 1.0 - 1e-6, "{label}: cosine {cos}");
}

#[test]
fn last_token_hidden_state_matches_transformers() {
    let golden = golden();
    let loaded = load(&fixtures().join("tiny-llama-f32"));
    for p in &golden.prompts {
        let ids = loaded.tokenizer.encode(&p.text, true).expect("encodes");
        assert_eq!(
            ids, p.prompt_ids,
            "{:?}: ids differ from transformers",
            p.text
        );
    }
    let mut runner = runner(loaded, 256);
    for p in &golden.prompts {
        let blocks = p.prompt_ids.len().div_ceil(16) as u32;
        let input = BatchInput {
            seqs: vec![SeqBatch {
                request_id: 0,
                tokens: p.prompt_ids.clone(),
                start_pos: 0,
                block_table: (0..blocks).collect(),
                num_logits: 1,
                adapter: None,
            }],
        };
        let hidden = runner.embed(&input).expect("embeds");
        assert_close(&p.text, &l2_normalised(&hidden), &p.embedding);
    }
}

#[test]
fn engine_embeddings_match_and_free_their_blocks() {
    let golden = golden();
    let loaded = load(&fixtures().join("tiny-llama-f32"));
    let tokenizer = Arc::new(loaded.tokenizer);
    // 6 blocks of 16: the longest prompt (88 tokens) needs all of them, so a single leaked
    // block would make the next embedding fail.
    let runner = ModelRunner::new(loaded.model, 16, 6, ThreadPool::global());
    let config = EngineConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 256,
        enable_prefix_caching: true,
        max_model_len: 96,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    let eos = tokenizer.eos_ids().to_vec();
    let engine = EngineHandle::start(Box::new(runner), tokenizer, eos, config);
    for _ in 0..3 {
        for p in &golden.prompts {
            let hidden = engine.embed(p.prompt_ids.clone()).expect("embeds");
            assert_close(&p.text, &l2_normalised(&hidden), &p.embedding);
        }
    }
    let stats = engine.stats();
    assert_eq!(stats.kv_usage, 0.0, "blocks left in use: {stats:?}");
    assert!(engine.embed(Vec::new()).is_err());
    assert!(
        engine.embed(vec![0; 97]).is_err(),
        "longer than max_model_len"
    );
    assert!(engine.embed(vec![u32::MAX]).is_err());
    engine.shutdown(std::time::Duration::from_secs(1));
}
