//! `kestrel bench --plot`: a run against the in-process fake server draws its latency CDFs and
//! throughput over time to an SVG whose series carry the run's sample counts; `--ttft-slo-ms`
//! reaches every request body; a PNG path is refused before any request is sent.

use crate::support;

use kestrel_bench::{run, BenchArgs, BenchError};
use support::{start, FakeConfig};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_draws_its_plot_and_sends_the_objective() {
    let server = start(FakeConfig::default()).await;
    let dir = temp_dir("plot");
    let path = dir.join("run.svg");
    let args = BenchArgs {
        base_url: server.base_url.clone(),
        num_prompts: Some(5),
        input_len: 8,
        output_len: 6,
        concurrency: Some(2),
        no_progress: true,
        plot: Some(path.clone()),
        ttft_slo_ms: Some(750),
        ..BenchArgs::default()
    };
    let report = run(args).await.expect("run");
    assert_eq!(report.successful_requests, 5);
    assert_eq!(report.samples.ttft_ms.len(), 5);
    assert_eq!(report.samples.itl_ms.len(), 25, "5 gaps per request");
    let per_second: f64 = report.samples.throughput_per_second().iter().sum();
    assert_eq!(per_second, report.total_output_tokens as f64);

    let svg = std::fs::read_to_string(&path).expect("the plot was written");
    assert!(svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for series in [
        "TTFT (5 samples)",
        "TPOT (5 samples)",
        "ITL (25 samples)",
        "E2E (5 samples)",
    ] {
        assert!(svg.contains(series), "no {series:?} in the plot");
    }
    assert!(svg.contains("Output throughput over time"));
    let json = serde_json::to_value(&report).expect("json");
    assert!(
        json.get("samples").is_none(),
        "samples stay out of the JSON"
    );

    let bodies = server.bodies();
    assert_eq!(bodies.len(), 5);
    assert!(bodies.iter().all(|b| b["ttft_slo_ms"] == 750), "{bodies:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_png_plot_is_refused_before_the_run() {
    let server = start(FakeConfig::default()).await;
    let args = BenchArgs {
        base_url: server.base_url.clone(),
        num_prompts: Some(2),
        no_progress: true,
        plot: Some(temp_dir("png").join("run.png")),
        ..BenchArgs::default()
    };
    let err = run(args).await.expect_err("png is not supported");
    assert!(matches!(err, BenchError::Plot(_)), "{err:?}");
    assert!(err.to_string().contains("only .svg"), "{err}");
    assert!(server.bodies().is_empty(), "no request was sent");
}
