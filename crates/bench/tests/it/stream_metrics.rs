//! End-to-end measurement against the in-process fake server with known injected delays.
//!
//! Lower bounds follow from the delays (a client cannot see a chunk before the server sleeps);
//! upper bounds are loose because the test machine may be busy.

use crate::support;

use std::time::Duration;

use kestrel_bench::schedule::poisson_arrivals;
use kestrel_bench::{run, ApiKind, BenchArgs, LoadMode, TokenSource};
use support::{start, FakeConfig};

fn args(base_url: &str) -> BenchArgs {
    BenchArgs {
        base_url: base_url.to_owned(),
        num_prompts: Some(6),
        input_len: 12,
        output_len: 6,
        concurrency: Some(2),
        no_progress: true,
        ..BenchArgs::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_timings_and_exact_token_counts() {
    // 150 ms to the first chunk, then 5 chunks 40 ms apart, split across two writes each.
    let server = start(FakeConfig {
        split_writes: true,
        ..FakeConfig::default()
    })
    .await;
    let r = run(args(&server.base_url)).await.unwrap();

    assert_eq!((r.successful_requests, r.failed_requests), (6, 0));
    assert_eq!(r.model, "fake-model", "model discovered from /v1/models");
    assert_eq!(r.api, ApiKind::Completions);
    assert_eq!(r.total_output_tokens, 36);
    assert_eq!(r.output_tokens_source, TokenSource::Server);
    assert_eq!(
        r.total_input_tokens, 72,
        "usage.prompt_tokens = 12 words x 6"
    );
    assert_eq!(r.content_chunks, 36);
    assert_eq!(r.multi_token_chunk_requests, 0);
    assert_eq!(r.peak_concurrency, 2);

    assert_eq!(r.ttft_ms.count, 6);
    assert!(
        r.ttft_ms.min_ms >= 150.0,
        "TTFT below the injected 150 ms: {:?}",
        r.ttft_ms
    );
    assert!(
        r.ttft_ms.median_ms < 650.0,
        "TTFT far above 150 ms: {:?}",
        r.ttft_ms
    );
    assert_eq!(r.itl_ms.count, 30, "5 gaps per request");
    // Each gap is 40 ms (+3 ms for the split write) on the server side.
    assert!(
        (35.0..250.0).contains(&r.itl_ms.median_ms),
        "ITL: {:?}",
        r.itl_ms
    );
    assert!(
        (35.0..250.0).contains(&r.itl_ms.mean_ms),
        "ITL: {:?}",
        r.itl_ms
    );
    assert!(
        (35.0..250.0).contains(&r.tpot_ms.mean_ms),
        "TPOT: {:?}",
        r.tpot_ms
    );
    assert!(
        r.e2el_ms.min_ms >= 350.0,
        "E2E below 150 + 5 x 40 ms: {:?}",
        r.e2el_ms
    );
    // Three waves of two requests, each at least 350 ms.
    assert!(r.duration_s >= 1.05, "duration {}", r.duration_s);
    assert!((r.request_throughput - 6.0 / r.duration_s).abs() < 1e-9);

    let bodies = server.bodies();
    assert_eq!(bodies.len(), 6);
    for b in &bodies {
        assert_eq!(b["model"], "fake-model");
        assert_eq!(b["stream"], true);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["max_tokens"], 6);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["prompt"].as_str().unwrap().split(' ').count(), 12);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_without_usage_counts_content_chunks() {
    let config = FakeConfig {
        usage: false,
        chunks: 4,
        ..FakeConfig::default()
    };
    let server = start(config).await;
    let a = BenchArgs {
        endpoint: "/v1/chat/completions".into(),
        model: Some("given".into()),
        num_prompts: Some(3),
        ..args(&server.base_url)
    };
    let r = run(a).await.unwrap();
    assert_eq!(r.api, ApiKind::Chat);
    assert_eq!(r.successful_requests, 3);
    assert_eq!(r.total_output_tokens, 12, "one token per content chunk");
    assert_eq!(r.output_tokens_source, TokenSource::Estimated);
    assert_eq!(r.total_input_tokens, 36, "estimated from --input-len");
    assert_eq!(r.input_tokens_source, TokenSource::Estimated);
    // The role-only chunk arrives at once; TTFT must wait for the first text.
    assert!(r.ttft_ms.min_ms >= 150.0, "TTFT {:?}", r.ttft_ms);
    assert_eq!(r.itl_ms.count, 9);
    for b in server.bodies() {
        assert_eq!(b["model"], "given");
        assert_eq!(b["messages"][0]["role"], "user");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_token_chunks_are_noted_and_tpot_uses_tokens() {
    let config = FakeConfig {
        chunks: 4,
        tokens_per_chunk: 3,
        ..FakeConfig::default()
    };
    let server = start(config).await;
    let r = run(BenchArgs {
        num_prompts: Some(2),
        ..args(&server.base_url)
    })
    .await
    .unwrap();
    assert_eq!(r.total_output_tokens, 24);
    assert_eq!(r.content_chunks, 8);
    assert_eq!(r.multi_token_chunk_requests, 2);
    assert_eq!(r.itl_ms.count, 6, "one ITL per chunk gap, as vLLM does");
    // 3 gaps of 40 ms spread over 11 tokens: TPOT about 11 ms, well below the chunk ITL.
    assert!(
        r.tpot_ms.mean_ms < r.itl_ms.mean_ms,
        "TPOT {:?} ITL {:?}",
        r.tpot_ms,
        r.itl_ms
    );
    assert!(r.tpot_ms.min_ms >= 120.0 / 11.0, "TPOT {:?}", r.tpot_ms);
    assert!(r.render_table().contains("several tokens"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisson_arrivals_follow_the_seeded_schedule() {
    let config = FakeConfig {
        first_delay: Duration::from_millis(5),
        token_delay: Duration::from_millis(5),
        chunks: 2,
        ..FakeConfig::default()
    };
    let server = start(config).await;
    let a = BenchArgs {
        concurrency: None,
        request_rate: Some(20.0),
        max_concurrency: Some(1),
        num_prompts: Some(10),
        seed: 42,
        ..args(&server.base_url)
    };
    let r = run(a).await.unwrap();
    assert_eq!(
        r.load,
        LoadMode::Poisson {
            request_rate: 20.0,
            max_concurrency: Some(1)
        }
    );
    assert_eq!(r.successful_requests, 10);
    assert_eq!(r.peak_concurrency, 1);
    let last_arrival = poisson_arrivals(10, 20.0, 42)[9].as_secs_f64();
    assert!(
        r.duration_s >= last_arrival,
        "{} < last arrival {last_arrival}",
        r.duration_s
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_out_round_trips() {
    let server = start(FakeConfig {
        chunks: 2,
        ..FakeConfig::default()
    })
    .await;
    let path =
        std::env::temp_dir().join(format!("kestrel-bench-report-{}.json", std::process::id()));
    let a = BenchArgs {
        num_prompts: Some(2),
        json_out: Some(path.clone()),
        ..args(&server.base_url)
    };
    let r = run(a).await.unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    // serde_json's default float parsing may differ in the last bit, so compare with tolerance.
    let expected = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json.as_object().unwrap().keys().collect::<Vec<_>>(),
        expected.as_object().unwrap().keys().collect::<Vec<_>>()
    );
    let ttft = json["ttft_ms"]["mean_ms"].as_f64().unwrap();
    assert!((ttft - r.ttft_ms.mean_ms).abs() < 1e-9);
    assert_eq!(json["total_output_tokens"], 4);
    assert_eq!(json["successful_requests"], 2);
    assert_eq!(
        json["load"],
        serde_json::json!({"mode": "concurrency", "concurrency": 2})
    );
    assert!(json["ttft_ms"]["p99_ms"].as_f64().unwrap() >= 150.0);
}
