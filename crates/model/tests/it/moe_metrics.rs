//! The tiny Mixtral GGUF served by an [`EngineCore`] under the Prometheus recorder the server
//! installs: `kestrel:moe_expert_tokens_total{layer,expert}` appears in the exposition text for
//! every layer and expert, and each layer's series sum to the tokens the engine computed
//! (`kestrel:iteration_tokens_total_sum`) times top-k. Two requests run together with a small
//! token budget, so prefill chunks and decode rows share steps; each request's greedy tokens
//! equal those of the same request run alone.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use kestrel_engine::api::{EngineEvent, EngineRequest, RequestLimits};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::core::EngineCore;
use kestrel_engine::sampling::SamplingParams;
use kestrel_model::{ModelRunner, ThreadPool};
use metrics_exporter_prometheus::PrometheusBuilder;

const BLOCK: usize = 16;
const NEW: usize = 8;

fn core() -> (EngineCore, usize) {
    let loaded = load(&fixtures().join("tiny-mixtral.gguf"));
    let top_k = loaded.config.moe.as_ref().expect("sparse").top_k;
    let tokenizer = Arc::new(loaded.tokenizer);
    let runner = ModelRunner::new(loaded.model, BLOCK, 64, ThreadPool::global());
    let config = EngineConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 24,
        enable_prefix_caching: false,
        max_model_len: 256,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    let core = EngineCore::new(Box::new(runner), tokenizer, vec![], &config).expect("config");
    (core, top_k)
}

fn request(prompt: &[u32]) -> EngineRequest {
    let sampling = SamplingParams {
        temperature: 0.0,
        max_tokens: NEW,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let limits = RequestLimits {
        vocab_size: 1 << 20,
        max_model_len: 256,
    };
    EngineRequest::new(prompt.to_vec(), sampling, &limits).expect("valid")
}

/// Run `prompts` together to completion; their generated ids.
fn run(core: &mut EngineCore, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let mut rxs = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        core.add_request(i as u64 + 1, request(p), tx);
        rxs.push(rx);
    }
    while core.has_unfinished() {
        core.step();
    }
    rxs.iter_mut()
        .map(|rx| {
            let mut ids = Vec::new();
            while let Ok(ev) = rx.try_recv() {
                if let EngineEvent::Token(t) = ev {
                    ids.push(t.id);
                }
            }
            ids
        })
        .collect()
}

/// `name{labels} value` lines of `metric` → value by label text.
fn series(text: &str, metric: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key[metric.len()..].to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn expert_token_counters_reach_the_exposition_and_sum_to_tokens_times_top_k() {
    let long: Vec<u32> = (0..40).map(|i| 3 + (i * 7 + i * i) % 200).collect();
    let short: Vec<u32> = vec![1, 5, 9, 14, 20];
    let alone: Vec<Vec<u32>> = [&long, &short]
        .iter()
        .map(|p| run(&mut core().0, &[p.to_vec()]).remove(0))
        .collect();
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let (together, top_k) = metrics::with_local_recorder(&recorder, || {
        let (mut core, top_k) = core();
        (run(&mut core, &[long.clone(), short.clone()]), top_k)
    });
    assert_eq!(
        together, alone,
        "batched greedy tokens equal each request alone"
    );
    let text = handle.render();
    let computed = series(&text, "kestrel:iteration_tokens_total_sum")[""];
    assert_eq!(computed as usize, 40 + 5 + 2 * (NEW - 1));
    let counts = series(&text, "kestrel:moe_expert_tokens_total");
    assert_eq!(counts.len(), 2 * 4, "2 layers x 4 experts:\n{text}");
    for layer in 0..2 {
        let sum: f64 = (0..4)
            .map(|e| counts[&format!("{{layer=\"{layer}\",expert=\"{e}\"}}")])
            .sum();
        assert_eq!(sum, computed * top_k as f64, "layer {layer}");
    }
}
