//! The engine on the real default model (SmolLM2-135M-Instruct Q4_1): greedy outputs of 16
//! concurrent requests of different lengths equal the outputs of the same requests run one at
//! a time, and a second conversation turn reuses the first turn's KV blocks.
//!
//! Needs `KESTREL_DEFAULT_MODEL` (the suite's script sets it); fails without it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kestrel_engine::api::{EngineEvent, EngineRequest, Usage};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::handle::{EngineHandle, ResponseStream};
use kestrel_engine::request::FinishReason;
use kestrel_engine::sampling::SamplingParams;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_model::tokenizer::Tokenizer;
use kestrel_model::{load_model, ModelRunner};

const BLOCK: usize = 16;
const BLOCKS: usize = 320;
const NEW_TOKENS: usize = 24;

const TEXT: &str =
    "The history of the lighthouse begins with fires lit on hilltops to guide ships \
home. Later, towers of stone carried lanterns of oil, and lenses invented in France bent the \
light into narrow beams that could be seen from twenty miles away. Keepers lived in small \
houses at the foot of each tower, trimming wicks every few hours through the night, recording \
the weather, and rowing out to help sailors in trouble. Today most lights are automatic: solar \
panels charge batteries, and a computer switches the lamp on at dusk. Some old towers have \
become museums, where visitors climb spiral stairs to see the great glass lens up close. In \
the kitchen, meanwhile, bread is made from flour, water, salt and yeast. The dough is kneaded \
until it is smooth and elastic, left to rise in a warm place, shaped into loaves and baked in a \
hot oven until the crust is brown and the loaf sounds hollow when tapped. Mathematicians prove \
that there are infinitely many prime numbers by assuming a largest one exists, multiplying all \
primes together, adding one, and showing the result has a prime factor missing from the list. \
Rivers carve valleys over millions of years, carrying sand to the sea, where it settles in \
layers that slowly turn into rock. Birds migrate thousands of kilometres each autumn, finding \
their way by the sun, the stars and the magnetic field of the Earth. A good cup of tea needs \
freshly boiled water, a warmed pot and a few minutes of patience before pouring.";

fn model_path() -> PathBuf {
    let path = std::env::var_os("KESTREL_DEFAULT_MODEL").expect(
        "KESTREL_DEFAULT_MODEL is not set: point it at the SmolLM2-135M-Instruct Q4_1 GGUF (scripts/test.sh sets it)",
    );
    PathBuf::from(path)
}

/// A fresh engine over the default model, and its tokenizer.
fn engine() -> (EngineHandle, Arc<Tokenizer>) {
    let path = model_path();
    let loaded = load_model(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
    let tokenizer = Arc::new(loaded.tokenizer);
    let runner = ModelRunner::new(loaded.model, BLOCK, BLOCKS, ThreadPool::global());
    let config = EngineConfig {
        max_num_seqs: 16,
        max_num_batched_tokens: 4096,
        enable_prefix_caching: true,
        max_model_len: 2048,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    let eos = tokenizer.eos_ids().to_vec();
    let handle = EngineHandle::start(Box::new(runner), tokenizer.clone(), eos, config);
    (handle, tokenizer)
}

fn greedy(engine: &EngineHandle, prompt: Vec<u32>) -> EngineRequest {
    let sampling = SamplingParams {
        temperature: 0.0,
        max_tokens: NEW_TOKENS,
        ..SamplingParams::default()
    };
    EngineRequest::new(prompt, sampling, &engine.limits()).expect("a valid request")
}

/// Generated ids, text and usage of a request that must finish normally.
fn run(mut stream: ResponseStream) -> (Vec<u32>, String, Usage) {
    let (mut ids, mut text) = (Vec::new(), String::new());
    while let Some(ev) = stream.blocking_next() {
        match ev {
            EngineEvent::Token(t) => {
                ids.push(t.id);
                text.push_str(&t.text);
            }
            EngineEvent::Finished {
                reason,
                text: tail,
                usage,
                ..
            } => {
                assert!(matches!(reason, FinishReason::Length | FinishReason::Stop));
                text.push_str(&tail);
                return (ids, text, usage);
            }
            EngineEvent::Failed(f) => panic!("request failed: {f}"),
        }
    }
    panic!("stream ended without a terminal event");
}

/// 16 prompts of 5..=200 tokens cut from different offsets of one passage (no shared prefix).
fn prompts(tokenizer: &Tokenizer) -> Vec<Vec<u32>> {
    let ids = tokenizer.encode(TEXT, false).expect("encodes");
    (0..16)
        .map(|i| {
            let (start, len) = (6 * i, 5 + 13 * i);
            assert!(
                start + len <= ids.len(),
                "passage too short: {} tokens",
                ids.len()
            );
            ids[start..start + len].to_vec()
        })
        .collect()
}

#[test]
fn concurrent_greedy_equals_sequential_and_second_turn_hits_prefix_cache() {
    let (batched, tokenizer) = engine();
    let prompts = prompts(&tokenizer);

    let t = Instant::now();
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| {
            batched
                .submit(greedy(&batched, p.clone()))
                .expect("admitted")
        })
        .collect();
    let together: Vec<_> = streams.into_iter().map(run).collect();
    let t_batched = t.elapsed();

    let (single, _) = engine();
    let t = Instant::now();
    let alone: Vec<_> = prompts
        .iter()
        .map(|p| run(single.submit(greedy(&single, p.clone())).expect("admitted")))
        .collect();
    let t_alone = t.elapsed();
    single.shutdown(Duration::from_secs(5));
    eprintln!(
        "16 requests x {NEW_TOKENS} tokens: batched {t_batched:?}, one at a time {t_alone:?}"
    );

    for (i, (b, a)) in together.iter().zip(&alone).enumerate() {
        assert_eq!(
            b.0,
            a.0,
            "request {i} ({} prompt tokens): batched ids differ from sequential",
            prompts[i].len()
        );
        assert_eq!(b.1, a.1, "request {i}: text differs");
        assert_eq!(b.2.prompt_tokens, prompts[i].len());
        assert_eq!(b.2.completion_tokens, b.0.len());
        assert!(!b.0.is_empty());
    }
    assert!(
        together.iter().any(|r| !r.1.trim().is_empty()),
        "some text was produced"
    );

    // Second turn of the longest conversation: prompt + answer + a follow-up.
    let first = prompts.last().expect("16 prompts");
    let mut turn = first.clone();
    turn.extend_from_slice(&together.last().expect("16 outputs").0);
    turn.extend(
        tokenizer
            .encode(" Tell me more about that.", false)
            .expect("encodes"),
    );
    let (ids, _, usage) = run(batched
        .submit(greedy(&batched, turn.clone()))
        .expect("admitted"));
    assert!(!ids.is_empty());
    let reusable = (first.len() / BLOCK) * BLOCK;
    assert!(
        usage.cached_tokens >= reusable && reusable > 0,
        "cached {} of {} tokens, expected >= {reusable}",
        usage.cached_tokens,
        turn.len()
    );
    assert!(usage.cached_tokens < turn.len());
    let stats = batched.stats();
    assert!(
        stats.prefix_cache_hits_total >= usage.cached_tokens as u64,
        "{stats:?}"
    );
    batched.shutdown(Duration::from_secs(5));
}
