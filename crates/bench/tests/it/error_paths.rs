//! Failures are counted, grouped and reported; they never abort the run.

use crate::support;

use kestrel_bench::{run, BenchArgs, BenchError};
use support::{start, Behavior, FakeConfig};

fn args(base_url: &str, n: usize) -> BenchArgs {
    BenchArgs {
        base_url: base_url.to_owned(),
        num_prompts: Some(n),
        input_len: 8,
        output_len: 4,
        concurrency: Some(3),
        no_progress: true,
        ..BenchArgs::default()
    }
}

fn fast() -> FakeConfig {
    FakeConfig {
        first_delay: std::time::Duration::from_millis(20),
        token_delay: std::time::Duration::from_millis(5),
        chunks: 4,
        ..FakeConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_429_and_500_are_counted_as_failures() {
    use Behavior::{Status, Stream};
    let behaviors = vec![Stream, Status(429), Stream, Status(500)];
    let server = start(FakeConfig {
        behaviors,
        ..fast()
    })
    .await;
    let r = run(args(&server.base_url, 8)).await.unwrap();

    assert_eq!((r.successful_requests, r.failed_requests), (4, 4));
    assert_eq!(r.total_output_tokens, 16, "only successful requests count");
    assert_eq!(r.ttft_ms.count, 4);
    let kinds: Vec<(&str, usize)> = r
        .errors
        .iter()
        .map(|e| (e.kind.as_str(), e.count))
        .collect();
    assert_eq!(kinds, vec![("http_429", 2), ("http_500", 2)]);
    assert!(r.errors[0].example.starts_with("HTTP 429: "));
    assert!(
        r.errors[0].example.contains("injected 429"),
        "{}",
        r.errors[0].example
    );
    let table = r.render_table();
    assert!(table.contains("http_500") && table.contains("Failed requests:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_stream_error_event_and_timeout_are_failures() {
    let behaviors = vec![Behavior::Stream, Behavior::ErrorEvent, Behavior::Hang];
    let server = start(FakeConfig {
        behaviors,
        ..fast()
    })
    .await;
    let a = BenchArgs {
        timeout: 0.5,
        ..args(&server.base_url, 3)
    };
    let started = std::time::Instant::now();
    let r = run(a).await.unwrap();
    assert!(
        started.elapsed().as_secs_f64() < 10.0,
        "the hang was not cut by --timeout"
    );
    assert_eq!((r.successful_requests, r.failed_requests), (1, 2));
    let kinds: Vec<&str> = r.errors.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, vec!["stream", "timeout"]);
    assert!(r.errors[0].example.contains("injected mid-stream failure"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_failed_is_an_error_and_still_writes_json() {
    let server = start(FakeConfig {
        behaviors: vec![Behavior::Status(503)],
        ..fast()
    })
    .await;
    let path =
        std::env::temp_dir().join(format!("kestrel-bench-failed-{}.json", std::process::id()));
    let a = BenchArgs {
        json_out: Some(path.clone()),
        ..args(&server.base_url, 3)
    };
    match run(a).await {
        Err(BenchError::AllFailed { total, first_error }) => {
            assert_eq!(total, 3);
            assert!(first_error.starts_with("HTTP 503"), "{first_error}");
        }
        other => panic!("expected AllFailed, got {other:?}"),
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(json["failed_requests"], 3);
    assert_eq!(json["errors"][0]["kind"], "http_503");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_reports_transport_errors() {
    // Bind then drop a listener to get a loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = BenchArgs {
        model: Some("m".into()),
        ..args(&format!("http://127.0.0.1:{port}"), 2)
    };
    match run(a).await {
        Err(BenchError::AllFailed { first_error, .. }) => {
            assert!(first_error.starts_with("transport error"), "{first_error}");
        }
        other => panic!("expected AllFailed, got {other:?}"),
    }
}
