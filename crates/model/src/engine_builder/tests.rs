//! The builder on the tiny random-weight HF Llama (tests/fixtures/tiny-llama-f32): engines
//! with and without n-gram speculation generate the same greedy tokens; LoRA adapters given
//! at start are registered; bad speculative settings and adapter paths are typed errors.

use std::path::PathBuf;

use kestrel_engine::api::{EngineEvent, EngineRequest};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::sampling::SamplingParams;

use super::{EngineBuildError, EngineBuilder, SpecMethod, SpeculativeError, SpeculativeOptions};
use crate::runner::KvSpec;
use crate::{load_model, KvDtype, LoadedModel, ThreadPool};

const NEW_TOKENS: usize = 24;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn tiny_llama() -> LoadedModel {
    let path = fixtures().join("tiny-llama-f32");
    load_model(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

fn builder(loaded: LoadedModel) -> EngineBuilder {
    let kv = KvSpec {
        block_size: 16,
        num_blocks: 16,
        dtype: KvDtype::F32,
    };
    let config = EngineConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 64,
        enable_prefix_caching: true,
        max_model_len: 256,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    EngineBuilder::new(loaded, kv, config, ThreadPool::global())
}

/// The greedy continuation of a prompt that repeats itself (so n-grams find drafts).
fn greedy_tokens(builder: EngineBuilder) -> Vec<u32> {
    let built = builder.build().expect("the engine starts");
    let text = "one two three four five one two three four five one two three";
    let prompt = built.tokenizer.encode(text, true).expect("encode");
    let sampling = SamplingParams {
        temperature: 0.0,
        max_tokens: NEW_TOKENS,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let request = EngineRequest::new(prompt, sampling, &built.engine.limits()).expect("valid");
    let mut stream = built.engine.submit(request).expect("submitted");
    let mut ids = Vec::new();
    while let Some(event) = stream.blocking_next() {
        match event {
            EngineEvent::Token(t) => ids.push(t.id),
            EngineEvent::Finished { .. } => break,
            EngineEvent::Failed(f) => panic!("generation failed: {f}"),
        }
    }
    built.engine.shutdown(std::time::Duration::ZERO);
    ids
}

#[test]
fn ngram_speculation_keeps_the_greedy_tokens() {
    let plain = greedy_tokens(builder(tiny_llama()));
    assert_eq!(plain.len(), NEW_TOKENS);
    let ngram = SpeculativeOptions::new(SpecMethod::Ngram);
    let speculative = greedy_tokens(builder(tiny_llama()).speculative(Some(ngram), None));
    assert_eq!(plain, speculative);
}

#[test]
fn the_built_engine_reports_its_kv_cache_and_model() {
    let built = builder(tiny_llama())
        .structured_output(true)
        .build()
        .expect("the engine starts");
    assert_eq!(built.kv.num_blocks, 16);
    assert!(built.kv_bytes_per_token > 0);
    assert!(built.adapters.is_empty());
    assert!(built.path.ends_with("tiny-llama-f32"));
    assert_eq!(built.engine.stats().num_kv_blocks, 16);
    built.engine.shutdown(std::time::Duration::ZERO);
}

#[test]
fn lora_modules_are_registered_in_order() {
    let adapter = fixtures().join("lora").join("all7");
    let built = builder(tiny_llama())
        .lora_modules(vec![("all7".into(), adapter)])
        .build()
        .expect("the engine starts");
    let names: Vec<_> = built.adapters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["all7"]);
    assert_eq!(built.engine.adapter_id("all7"), Some(built.adapters[0].id));
    built.engine.shutdown(std::time::Duration::ZERO);
}

#[test]
fn a_missing_adapter_is_a_lora_error() {
    let missing = fixtures().join("lora").join("no-such-adapter");
    let err = builder(tiny_llama())
        .lora_modules(vec![("nope".into(), missing)])
        .build()
        .err()
        .expect("the adapter is refused");
    assert!(
        matches!(&err, EngineBuildError::Lora { name, .. } if name == "nope"),
        "{err}"
    );
}

#[test]
fn the_draft_method_without_a_draft_model_is_refused() {
    let mut opts = SpeculativeOptions::new(SpecMethod::Draft);
    opts.draft_model = Some("draft.gguf".into());
    let err = builder(tiny_llama())
        .speculative(Some(opts), None)
        .build()
        .err()
        .expect("no draft was loaded");
    assert!(
        matches!(
            err,
            EngineBuildError::Speculative(SpeculativeError::NoDraft)
        ),
        "{err}"
    );
}
