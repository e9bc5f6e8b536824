//! `LaunchOptions::speculative` on the tiny fixture: a draft model with another tokenizer (the
//! fixture beside the default model, `KESTREL_DEFAULT_MODEL`) is refused with a clear error; n-gram and draft-model speculation produce the plain greedy
//! output and publish the `vllm:spec_decode_*` counters in /metrics.

use std::path::PathBuf;

use kestrel_engine::api::{EngineEvent, EngineRequest};
use kestrel_engine::handle::EngineHandle;
use kestrel_engine::sampling::SamplingParams;
use kestrel_model::engine_builder::{SpecMethod, SpeculativeOptions};
use kestrel_model::ThreadPool;
use kestrel_server::launch::{start_engine_with_draft, KvBudget, LaunchOptions, Launched};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn load(name: &str) -> kestrel_model::LoadedModel {
    kestrel_model::load_model(&fixture(name)).expect("load a tiny model")
}

fn pool() -> &'static ThreadPool {
    Box::leak(Box::new(ThreadPool::new(1)))
}

fn options(speculative: Option<SpeculativeOptions>) -> LaunchOptions {
    LaunchOptions {
        max_num_seqs: 8,
        max_num_batched_tokens: 256,
        block_size: 16,
        kv_cache: KvBudget::Tokens(16 * 64),
        speculative,
        ..LaunchOptions::default()
    }
}

fn draft_options() -> SpeculativeOptions {
    SpeculativeOptions {
        draft_model: Some(fixture("tiny-llama-f32")),
        ..SpeculativeOptions::new(SpecMethod::Draft)
    }
}

fn launch(spec: Option<SpeculativeOptions>, draft: Option<&str>) -> Launched {
    start_engine_with_draft(
        load("tiny-llama-f32"),
        draft.map(load),
        &options(spec),
        pool(),
    )
    .expect("launch")
}

/// Greedy ids for a prompt that repeats itself (so n-gram drafts are proposed).
fn generate(engine: &EngineHandle) -> Vec<u32> {
    let prompt: Vec<u32> = [5, 9, 17, 33, 5, 9, 17, 33, 5, 9].to_vec();
    let sampling = SamplingParams {
        temperature: 0.0,
        max_tokens: 24,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let req = EngineRequest::new(prompt, sampling, &engine.limits()).expect("valid request");
    let mut stream = engine.submit(req).expect("submitted");
    let mut ids = Vec::new();
    while let Some(ev) = stream.blocking_next() {
        match ev {
            EngineEvent::Token(t) => ids.push(t.id),
            EngineEvent::Finished { .. } => break,
            EngineEvent::Failed(f) => panic!("failed: {f:?}"),
        }
    }
    ids
}

#[test]
fn a_draft_model_with_another_tokenizer_is_refused() {
    // The fixtures share one tokenizer; the default model's is another.
    let path = std::env::var_os("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL is not set: point it at the SmolLM2-135M-Instruct Q4_1 GGUF (scripts/test.sh sets it)",
    );
    let target = kestrel_model::load_model(std::path::Path::new(&path)).expect("default model");
    let err = start_engine_with_draft(
        target,
        Some(load("tiny-llama-f32")),
        &options(Some(draft_options())),
        pool(),
    )
    .err()
    .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("does not share the target's tokenizer") && msg.contains("vocabulary of 384"),
        "unclear error: {msg}"
    );
    let err = start_engine_with_draft(
        load("tiny-llama-f32"),
        None,
        &options(Some(draft_options())),
        pool(),
    )
    .err()
    .expect("refused without the draft loaded");
    assert!(err.to_string().contains("draft model"), "{err}");
}

#[test]
fn speculative_serving_keeps_greedy_outputs_and_publishes_counters() {
    let plain = launch(None, None);
    let want = generate(&plain.engine);
    assert_eq!(want.len(), 24);
    let ngram = launch(Some(SpeculativeOptions::new(SpecMethod::Ngram)), None);
    assert_eq!(generate(&ngram.engine), want);
    let draft = launch(Some(draft_options()), Some("tiny-llama-f32"));
    assert_eq!(generate(&draft.engine), want);
    let text = draft.metrics.render();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
    };
    let drafts = value("vllm:spec_decode_num_draft_tokens_total");
    let accepted = value("vllm:spec_decode_num_accepted_tokens_total");
    assert!(value("vllm:spec_decode_num_drafts_total") > 0.0);
    // The draft is the target: its greedy drafts are accepted.
    assert!(
        accepted > 0.0 && accepted <= drafts,
        "{accepted} of {drafts}"
    );
}
