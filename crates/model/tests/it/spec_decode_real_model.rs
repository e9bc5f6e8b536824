//! Speculative decoding on the real default model (SmolLM2-135M-Instruct Q4_1): greedy outputs
//! with n-gram drafts and with a draft model (the same GGUF loaded a second time, with its own
//! KV cache indexed by the target's block tables) equal the outputs without speculation; the
//! draft counters move; no KV block stays held after the runs or after aborts.
//!
//! Needs `KESTREL_DEFAULT_MODEL` (the suite's script sets it); fails without it.

use std::path::PathBuf;
use std::sync::Arc;

use kestrel_engine::api::{EngineEvent, EngineRequest};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::core::EngineCore;
use kestrel_engine::request::{FinishReason, RequestId};
use kestrel_engine::sampling::SamplingParams;
use kestrel_engine::speculative::{
    DraftModelProposer, NgramProposer, Proposer, SpecCounters, SpeculativeConfig, Speculator,
};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::tokenizer::Tokenizer;
use kestrel_model::{load_model, LoadedModel, ModelRunner};

const BLOCK: usize = 16;
const BLOCKS: usize = 192;
const NEW_TOKENS: usize = 40;

const PARAGRAPH: &str = "Keepers lived in small houses at the foot of each tower, trimming \
wicks every few hours through the night, recording the weather, and rowing out to help sailors \
in trouble. Today most lights are automatic: solar panels charge batteries, and a computer \
switches the lamp on at dusk.";

fn model_path() -> PathBuf {
    let path = std::env::var_os("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL is not set: point it at the SmolLM2-135M-Instruct Q4_1 GGUF (scripts/test.sh sets it)",
    );
    PathBuf::from(path)
}

fn load() -> LoadedModel {
    let path = model_path();
    load_model(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

fn prompts(tok: &Tokenizer) -> Vec<Vec<u32>> {
    let copy = format!(
        "Repeat the paragraph below word for word.\n\nParagraph: {PARAGRAPH}\n\nRepeated: Keepers lived"
    );
    let free = "The three most important inventions of the last century are";
    [copy.as_str(), free]
        .iter()
        .map(|p| tok.encode(p, true).expect("encode"))
        .collect()
}

fn config() -> EngineConfig {
    EngineConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 512,
        enable_prefix_caching: true,
        max_model_len: 1024,
        max_concurrent_requests: None,
        lora: Default::default(),
    }
}

fn greedy(prompt: &[u32], vocab: usize) -> EngineRequest {
    let sampling = SamplingParams {
        temperature: 0.0,
        max_tokens: NEW_TOKENS,
        ..SamplingParams::default()
    };
    let limits = kestrel_engine::api::RequestLimits {
        vocab_size: vocab,
        max_model_len: 1024,
    };
    EngineRequest::new(prompt.to_vec(), sampling, &limits).expect("a valid request")
}

/// A request's generated ids and finish reason.
type Outcome = (Vec<u32>, FinishReason);

/// Runs the prompts together; returns each one's ids and finish reason, the speculation counts
/// and the free KV blocks at the end.
fn run(
    spec: Option<Speculator>,
    prompts: &[Vec<u32>],
) -> (Vec<Outcome>, Option<SpecCounters>, usize) {
    let loaded = load();
    let vocab = loaded.model.dims().vocab;
    let tokenizer = Arc::new(loaded.tokenizer);
    let runner = ModelRunner::new(loaded.model, BLOCK, BLOCKS, ThreadPool::global());
    let eos = tokenizer.eos_ids().to_vec();
    let mut core = EngineCore::new(Box::new(runner), tokenizer, eos, &config()).expect("core");
    if let Some(s) = spec {
        core = core.with_speculator(s);
    }
    let mut rxs = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        core.add_request(i as RequestId, greedy(p, vocab), tx);
        rxs.push(rx);
    }
    while core.has_unfinished() {
        core.step();
    }
    let outs = rxs
        .into_iter()
        .map(|mut rx| {
            let mut ids = Vec::new();
            let mut reason = None;
            while let Ok(ev) = rx.try_recv() {
                match ev {
                    EngineEvent::Token(t) => ids.push(t.id),
                    EngineEvent::Finished { reason: r, .. } => reason = Some(r),
                    EngineEvent::Failed(f) => panic!("request failed: {f:?}"),
                }
            }
            (ids, reason.expect("finished"))
        })
        .collect();
    (outs, core.spec_counters(), core.num_free_kv_blocks())
}

fn speculator(proposer: Box<dyn Proposer>) -> Speculator {
    Speculator::new(SpeculativeConfig::new(4), proposer)
}

fn draft_proposer() -> Box<dyn Proposer> {
    let draft = load();
    let runner = ModelRunner::new(draft.model, BLOCK, BLOCKS, ThreadPool::global());
    Box::new(DraftModelProposer::new(Box::new(runner)))
}

#[test]
fn greedy_outputs_with_ngram_and_draft_speculation_equal_plain_decoding() {
    let tok = load().tokenizer;
    let prompts = prompts(&tok);
    let (plain, _, free) = run(None, &prompts);
    assert_eq!(free, BLOCKS);
    assert!(plain.iter().all(|(ids, _)| !ids.is_empty()));

    let (ngram, counts, free) = run(
        Some(speculator(Box::new(NgramProposer::new(2, 4)))),
        &prompts,
    );
    for (i, (a, b)) in plain.iter().zip(&ngram).enumerate() {
        assert_eq!(
            a,
            b,
            "prompt {i}: plain {:?} / ngram {:?}",
            tok.decode(&a.0, false),
            tok.decode(&b.0, false)
        );
    }
    let c = counts.expect("speculating");
    assert!(
        c.num_accepted_tokens >= 10,
        "the copy prompt accepts n-gram drafts: {c:?}"
    );
    assert_eq!(free, BLOCKS, "no KV block held after the ngram run");

    let (draft, counts, free) = run(Some(speculator(draft_proposer())), &prompts);
    assert_eq!(draft, plain);
    let c = counts.expect("speculating");
    assert!(c.num_drafts > 0, "{c:?}");
    // The draft is the target itself: nearly every greedy draft token is accepted.
    assert!(
        c.num_accepted_tokens * 10 >= c.num_draft_tokens * 9,
        "a draft equal to the target is accepted: {c:?}"
    );
    assert_eq!(free, BLOCKS, "no KV block held after the draft run");
}

#[test]
fn aborting_draft_speculation_frees_every_block() {
    let loaded = load();
    let vocab = loaded.model.dims().vocab;
    let prompts = prompts(&loaded.tokenizer);
    let tokenizer = Arc::new(loaded.tokenizer);
    let runner = ModelRunner::new(loaded.model, BLOCK, BLOCKS, ThreadPool::global());
    let eos = tokenizer.eos_ids().to_vec();
    let mut core = EngineCore::new(Box::new(runner), tokenizer, eos, &config())
        .expect("core")
        .with_speculator(speculator(draft_proposer()));
    for (i, p) in prompts.iter().enumerate() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        core.add_request(i as RequestId, greedy(p, vocab), tx);
    }
    for _ in 0..4 {
        core.step();
    }
    assert!(core.spec_counters().expect("speculating").num_drafts > 0);
    for i in 0..prompts.len() {
        assert!(core.abort(i as RequestId));
    }
    assert_eq!(core.num_free_kv_blocks(), BLOCKS);
}
