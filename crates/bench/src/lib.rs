//! `kestrel-bench`: the load generator behind `kestrel bench`.
//!
//! It drives any OpenAI-compatible server (`/v1/completions` or `/v1/chat/completions`) with
//! streaming requests and reports the metric set of vLLM's `bench serve`: request and token
//! throughput, and mean / median / p90 / p99 of time to first token (TTFT), time per output
//! token (TPOT), inter-token latency (ITL) and end-to-end latency (E2EL).
//!
//! ```text
//!  BenchArgs --Plan::from_args--> Plan --runner--> [RequestOutcome] --build--> BenchReport
//!   (flags)     (validate, prompts)      (schedule, semaphore,      (stats)     (table, JSON)
//!                                         SSE timing per request)
//! ```
//!
//! `--multi-turn` runs conversations instead of independent requests ([`multi_turn`]): each
//! turn resends the history, and the report gives TTFT and prefix-cache hit rate per turn.
//!
//! `--plot out.svg` or `--plot out.png` draws the latency CDFs and output throughput over time
//! ([`plot`], from the report's [`samples::Samples`]).
//!
//! Main types: [`BenchArgs`] (clap flags), [`BenchReport`] (result, `Serialize`),
//! [`BenchError`]; building blocks: [`sse::SseParser`], [`stats::percentile`],
//! [`schedule::poisson_arrivals`].

mod args;
pub mod chunk;
mod client;
pub mod compare;
mod error;
pub mod goodput;
mod measure;
pub mod multi_turn;
pub mod outcome;
mod plan;
pub mod plot;
mod prompts;
mod report;
mod runner;
pub mod samples;
pub mod schedule;
pub mod sse;
pub mod stats;

use indicatif::{ProgressBar, ProgressStyle};

pub use args::{BenchArgs, BenchCommand};
pub use error::BenchError;
pub use multi_turn::MultiTurnReport;
pub use plan::{ApiKind, LoadMode};
pub use report::{BenchReport, ErrorSummary, TokenSource};
pub use stats::LatencyStats;

use client::{build_client, discover_model, Target};
use plan::Plan;

/// Runs a benchmark: validates the flags, sends every request, writes `--json-out` if given.
///
/// Individual request failures are counted in the report; an error is returned only when the
/// run cannot start, the JSON cannot be written, or no request succeeded (the JSON report is
/// still written in that case).
pub async fn run(args: BenchArgs) -> Result<BenchReport, BenchError> {
    if args.multi_turn {
        return Err(BenchError::InvalidArgs(
            "--multi-turn runs through multi_turn::run".into(),
        ));
    }
    let plan = Plan::from_args(&args)?;
    let client = build_client(plan.max_in_flight(), plan.timeout)?;
    let model = match &plan.model {
        Some(m) => m.clone(),
        None => discover_model(&client, &plan.base_url, plan.api_key.as_deref()).await,
    };
    let target = Target {
        client,
        url: plan.url.clone(),
        api: plan.api,
        model: model.clone(),
        api_key: plan.api_key.clone(),
        min_tokens: plan.min_tokens,
        ignore_eos: plan.ignore_eos,
        timeout: plan.timeout,
        ttft_slo_ms: plan.ttft_slo_ms,
    };
    let load = runner::run_load(&plan, target, progress_bar(&plan)).await;
    let report = BenchReport::build(&plan, &model, &load);
    if let Some(path) = &plan.json_out {
        let json = serde_json::to_string_pretty(&report).map_err(BenchError::Serialize)?;
        std::fs::write(path, json + "\n").map_err(|source| BenchError::JsonOut {
            path: path.clone(),
            source,
        })?;
    }
    if let Some(path) = &plan.plot {
        let title = format!(
            "kestrel bench: {} on {}{} ({})",
            model,
            plan.base_url,
            plan.endpoint,
            report::load_label(&plan.load)
        );
        plot::render(&report.samples, &title, path).map_err(BenchError::Plot)?;
    }
    if report.successful_requests == 0 {
        let first_error = load
            .outcomes
            .iter()
            .find_map(|o| o.as_ref().err())
            .map_or_else(String::new, ToString::to_string);
        return Err(BenchError::AllFailed {
            total: report.num_prompts,
            first_error,
        });
    }
    Ok(report)
}

/// [`run`] on a fresh multi-threaded Tokio runtime, for callers without one.
pub fn run_blocking(args: BenchArgs) -> Result<BenchReport, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    runtime.block_on(run(args))
}

fn progress_bar(plan: &Plan) -> ProgressBar {
    if !plan.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(plan.prompts.len() as u64);
    let template = "{elapsed_precise} [{bar:40}] {pos}/{len} requests {msg}";
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
