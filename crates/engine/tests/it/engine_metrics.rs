//! [`EngineCore`] driven on the test thread under a local `metrics` recorder: every metric is
//! recorded under its exported name with the expected values.

use crate::engine_common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use engine_common::*;
use kestrel_engine::api::{EngineEvent, EngineFailure};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::core::EngineCore;
use kestrel_engine::executor::ExecutorError;
use kestrel_engine::mock_executor::{reference_generate, MockExecutor};
use kestrel_engine::model_failure::ModelFailure;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Every value recorded, by `name{label=value,...}`.
#[derive(Default)]
struct Store {
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
}

struct Handle(Arc<Mutex<Store>>, String);

impl CounterFn for Handle {
    fn increment(&self, v: u64) {
        *self
            .0
            .lock()
            .unwrap()
            .counters
            .entry(self.1.clone())
            .or_default() += v;
    }
    fn absolute(&self, v: u64) {
        self.0.lock().unwrap().counters.insert(self.1.clone(), v);
    }
}

impl GaugeFn for Handle {
    fn increment(&self, v: f64) {
        *self
            .0
            .lock()
            .unwrap()
            .gauges
            .entry(self.1.clone())
            .or_default() += v;
    }
    fn decrement(&self, v: f64) {
        *self
            .0
            .lock()
            .unwrap()
            .gauges
            .entry(self.1.clone())
            .or_default() -= v;
    }
    fn set(&self, v: f64) {
        self.0.lock().unwrap().gauges.insert(self.1.clone(), v);
    }
}

impl HistogramFn for Handle {
    fn record(&self, v: f64) {
        self.0
            .lock()
            .unwrap()
            .histograms
            .entry(self.1.clone())
            .or_default()
            .push(v);
    }
}

#[derive(Default)]
struct TestRecorder(Arc<Mutex<Store>>);

impl TestRecorder {
    fn handle(&self, key: &Key) -> Arc<Handle> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = if labels.is_empty() {
            key.name().to_string()
        } else {
            format!("{}{{{}}}", key.name(), labels.join(","))
        };
        Arc::new(Handle(self.0.clone(), name))
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key))
    }
}

#[test]
fn metrics_are_recorded_under_their_names() {
    let recorder = TestRecorder::default();
    let cfg = EngineConfig {
        max_num_seqs: 256,
        max_num_batched_tokens: 2048,
        enable_prefix_caching: true,
        max_model_len: usize::MAX,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    let exec = MockExecutor::new(64, BLOCK, VOCAB);
    let mut core = EngineCore::new(Box::new(exec), Arc::new(LetterDecoder), vec![EOS], &cfg)
        .expect("valid config");
    let p = prompt(2, 10);
    let want = reference_generate(&p, 6, &[EOS], VOCAB);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (tx2, mut rx2) = tokio::sync::mpsc::unbounded_channel();
    metrics::with_local_recorder(&recorder, || {
        core.add_request(1, request(p.clone(), 6).build(), tx);
        while core.has_unfinished() {
            core.step();
        }
        core.add_request(2, request(p.clone(), 6).build(), tx2); // same prompt: 8 tokens cached
        while core.has_unfinished() {
            core.step();
        }
    });
    for rx in [&mut rx, &mut rx2] {
        let mut n = 0;
        while let Ok(ev) = rx.try_recv() {
            n += usize::from(matches!(ev, EngineEvent::Token(_)));
        }
        assert_eq!(n, want.len());
    }
    let s = recorder.0.lock().unwrap();
    let c = |k: &str| s.counters.get(k).copied().unwrap_or(0);
    let h = |k: &str| s.histograms.get(k).map_or(0, Vec::len);
    assert_eq!(c("kestrel:prompt_tokens_total"), 20);
    assert_eq!(c("kestrel:generation_tokens_total"), 2 * want.len() as u64);
    let reason = if want.last() == Some(&EOS) {
        "stop"
    } else {
        "length"
    };
    assert_eq!(
        c(&format!(
            "kestrel:request_success_total{{finished_reason={reason}}}"
        )),
        2
    );
    assert_eq!(c("kestrel:prefix_cache_queries_total"), 20);
    assert_eq!(c("kestrel:prefix_cache_hits_total"), 8);
    assert_eq!(c("kestrel:num_preemptions_total"), 0);
    assert_eq!(s.gauges["kestrel:num_requests_running"], 0.0);
    assert_eq!(s.gauges["kestrel:num_requests_waiting"], 0.0);
    assert_eq!(s.gauges["kestrel:kv_cache_usage_perc"], 0.0);
    assert_eq!(h("kestrel:time_to_first_token_seconds"), 2);
    assert_eq!(
        h("kestrel:inter_token_latency_seconds"),
        2 * (want.len() - 1)
    );
    assert_eq!(h("kestrel:e2e_request_latency_seconds"), 2);
    assert_eq!(h("kestrel:request_queue_time_seconds"), 2);
    assert_eq!(
        s.histograms["kestrel:request_prompt_tokens"],
        vec![10.0, 10.0]
    );
    let gen = want.len() as f64;
    assert_eq!(
        s.histograms["kestrel:request_generation_tokens"],
        vec![gen, gen]
    );
    let iters = &s.histograms["kestrel:iteration_tokens_total"];
    assert_eq!(
        iters.iter().sum::<f64>(),
        (10 + 2 + 2 * (want.len() - 1)) as f64,
        "10 + 2 prompt tokens computed, then decodes"
    );
    for timed in [
        "kestrel:iteration_forward_seconds",
        "kestrel:iteration_sampling_seconds",
    ] {
        let times = &s.histograms[timed];
        assert_eq!(times.len(), iters.len(), "{timed}: one sample a step");
        assert!(
            times.iter().all(|t| (0.0..60.0).contains(t)),
            "{timed}: {times:?}"
        );
    }
}

#[test]
fn max_num_seqs_is_published_when_the_core_is_created() {
    let recorder = TestRecorder::default();
    let cfg = EngineConfig {
        max_num_seqs: 7,
        max_num_batched_tokens: 2048,
        enable_prefix_caching: true,
        max_model_len: usize::MAX,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    metrics::with_local_recorder(&recorder, || {
        let exec = MockExecutor::new(64, BLOCK, VOCAB);
        EngineCore::new(Box::new(exec), Arc::new(LetterDecoder), vec![EOS], &cfg)
            .expect("valid config");
    });
    let s = recorder.0.lock().unwrap();
    assert_eq!(s.gauges.get("kestrel:max_num_seqs"), Some(&7.0));
    assert_eq!(s.gauges.get("kestrel:kv_num_blocks"), Some(&64.0));
    assert_eq!(s.gauges.get("kestrel:kv_free_blocks"), Some(&64.0));
}

#[test]
fn idle_checks_are_counted_and_free_blocks_published() {
    let recorder = TestRecorder::default();
    let cfg = EngineConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 2048,
        enable_prefix_caching: true,
        max_model_len: usize::MAX,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    let stats = metrics::with_local_recorder(&recorder, || {
        let exec = MockExecutor::new(32, BLOCK, VOCAB);
        let mut core = EngineCore::new(Box::new(exec), Arc::new(LetterDecoder), vec![EOS], &cfg)
            .expect("valid config");
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        core.add_request(1, request(prompt(1, 10), 5).build(), tx);
        core.step();
        // With a request alive its blocks are held legitimately: the check passes.
        assert_eq!(core.check_idle(), Ok(()));
        while core.has_unfinished() {
            core.step();
        }
        assert_eq!(core.check_idle(), Ok(()));
        core.stats()
    });
    let s = recorder.0.lock().unwrap();
    assert_eq!(s.counters.get("kestrel:kv_idle_checks_total"), Some(&2));
    assert_eq!(s.counters.get("kestrel:kv_idle_check_failures_total"), None);
    assert_eq!(s.gauges.get("kestrel:kv_free_blocks"), Some(&32.0));
    assert_eq!(stats.kv_idle_checks_total, 2);
    assert_eq!(stats.kv_idle_check_failures_total, 0);
    assert_eq!(stats.kv_free_blocks, 32);
}

#[test]
fn window_releases_are_counted_and_the_usage_gauge_stays_bounded() {
    let recorder = TestRecorder::default();
    let cfg = EngineConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 64,
        enable_prefix_caching: true,
        max_model_len: 1024,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    // A model with a window of 6 on every layer, over 32 blocks of 4.
    let exec = MockExecutor::new(32, BLOCK, VOCAB).with_window(6);
    let mut core = EngineCore::new(Box::new(exec), Arc::new(LetterDecoder), vec![EOS], &cfg)
        .expect("valid config");
    let p = prompt(3, 12);
    let mut req = request(p.clone(), 80);
    req.sampling.ignore_eos = true;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut peak_usage = 0.0f64;
    metrics::with_local_recorder(&recorder, || {
        core.add_request(1, req.build(), tx);
        while core.has_unfinished() {
            core.step();
            let usage = recorder.0.lock().unwrap().gauges["kestrel:kv_cache_usage_perc"];
            peak_usage = peak_usage.max(usage);
        }
    });
    let mut n = 0;
    while let Ok(ev) = rx.try_recv() {
        n += usize::from(matches!(ev, EngineEvent::Token(_)));
    }
    assert_eq!(n, 80);
    // The last computed position is 12 + 80 - 2 = 90; the next query (91) sees 86..=91, so
    // blocks 0..21 (positions 0..84) were released along the way.
    let s = recorder.0.lock().unwrap();
    assert_eq!(s.counters["kestrel:kv_window_blocks_freed_total"], 21);
    assert_eq!(core.stats().kv_window_blocks_freed_total, 21);
    // Between steps the request holds the 5 cached keys its next query sees: 2 blocks of the
    // 32 (keeping every block it would reach 23).
    assert_eq!(peak_usage, 2.0 / 32.0);
    assert_eq!(s.gauges["kestrel:kv_cache_usage_perc"], 0.0);
}

#[test]
fn speculative_decoding_counters_are_recorded_under_vllm_names() {
    use kestrel_engine::speculative::{NgramProposer, SpeculativeConfig, Speculator};
    let recorder = TestRecorder::default();
    let cfg = EngineConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 256,
        enable_prefix_caching: true,
        max_model_len: usize::MAX,
        max_concurrent_requests: None,
        lora: Default::default(),
    };
    let spec = Speculator::new(
        SpeculativeConfig::new(3),
        Box::new(NgramProposer::new(1, 3)),
    );
    let mut core = EngineCore::new(
        Box::new(MockExecutor::new(64, BLOCK, VOCAB)),
        Arc::new(LetterDecoder),
        vec![EOS],
        &cfg,
    )
    .expect("valid config")
    .with_speculator(spec);
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    metrics::with_local_recorder(&recorder, || {
        // A repetitive prompt: its suffixes recur, so n-gram drafts are proposed.
        core.add_request(1, request(prompt(5, 3).repeat(5), 24).build(), tx);
        while core.has_unfinished() {
            core.step();
        }
    });
    let counts = core.spec_counters().expect("speculating");
    assert!(counts.num_drafts > 0, "{counts:?}");
    let s = recorder.0.lock().unwrap();
    let c = |k: &str| s.counters.get(k).copied().unwrap_or(0);
    assert_eq!(c("vllm:spec_decode_num_drafts_total"), counts.num_drafts);
    assert_eq!(
        c("vllm:spec_decode_num_draft_tokens_total"),
        counts.num_draft_tokens
    );
    assert_eq!(
        c("vllm:spec_decode_num_accepted_tokens_total"),
        counts.num_accepted_tokens
    );
    assert_eq!(
        c("vllm:spec_decode_num_emitted_tokens_total"),
        counts.num_accepted_tokens + counts.num_drafts
    );
    assert!(counts.num_draft_tokens >= counts.num_drafts);
}

#[test]
fn a_failed_request_is_counted_as_a_failure_with_its_cause_not_as_an_abort() {
    let recorder = TestRecorder::default();
    let config = config(64);
    let (exec, ctl) = controlled(&config);
    ctl.fail_at_step(0);
    let mut core = EngineCore::new(
        Box::new(exec),
        Arc::new(LetterDecoder),
        vec![EOS],
        &config.engine(),
    )
    .expect("valid config");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    metrics::with_local_recorder(&recorder, || {
        core.add_request(1, request(prompt(1, 5), 4).build(), tx);
        while core.has_unfinished() {
            core.step();
        }
    });
    let failure = std::iter::from_fn(|| rx.try_recv().ok())
        .find_map(|ev| match ev {
            EngineEvent::Failed(f) => Some(f),
            _ => None,
        })
        .expect("the request failed");
    assert!(
        matches!(
            &failure,
            EngineFailure::Model(ModelFailure::Forward(ExecutorError::Failed(m)))
                if m == "injected failure"
        ),
        "the typed cause is kept: {failure:?}"
    );
    assert_eq!(
        failure.to_string(),
        "the model failed: model execution failed: injected failure"
    );
    let s = recorder.0.lock().unwrap();
    let c = |k: &str| s.counters.get(k).copied().unwrap_or(0);
    assert_eq!(c("kestrel:request_failures_total{cause=model}"), 1);
    assert_eq!(c("kestrel:request_success_total{finished_reason=abort}"), 0);
    assert_eq!(core.num_free_kv_blocks(), 64);
}
