//! `kestrel bench --multi-turn`: conversations of several turns against a chat endpoint, in the
//! manner of vLLM's multi-turn serving benchmark.
//!
//! ```text
//!  BenchArgs --MultiTurnPlan::from_args--> MultiTurnPlan --runner--> [TurnRecord] --build--> MultiTurnReport
//!   (flags)    (validate, scripts of        (conversations as tasks,   (per turn:     (per turn index,
//!               system + user messages)      --concurrency of them)     TTFT, cached)  table, JSON, plot)
//! ```
//!
//! Each turn sends the whole history ([`conversation::History`]) and asks for usage with
//! `stream_options.include_usage`, so the server's `prompt_tokens_details.cached_tokens` gives
//! the prefix-cache hit rate per turn. A failed turn ends its conversation (see
//! [`conversation`]). Main types: [`MultiTurnReport`], [`TurnStats`], [`PrefixHits`].

mod conversation;
mod plan;
mod report;
mod runner;

use indicatif::{ProgressBar, ProgressStyle};

pub use conversation::{TurnRecord, TurnResult};
pub use plan::MultiTurnShape;
pub use report::{MultiTurnReport, PrefixHits, TurnStats};

use crate::args::BenchArgs;
use crate::client::{build_client, discover_model, Target};
use crate::error::BenchError;
use crate::plan::ApiKind;
use crate::plot::{self, TurnPoint};
use plan::MultiTurnPlan;

/// Runs a multi-turn benchmark: validates the flags, runs every conversation, writes
/// `--json-out` and `--plot` if given.
///
/// Failed turns are counted in the report; an error is returned only when the run cannot
/// start, an output cannot be written, or no request succeeded (the JSON is still written).
pub async fn run(args: BenchArgs) -> Result<MultiTurnReport, BenchError> {
    let plan = MultiTurnPlan::from_args(&args)?;
    let client = build_client(plan.shape.concurrency, plan.timeout)?;
    let model = match &plan.model {
        Some(m) => m.clone(),
        None => discover_model(&client, &plan.base_url, plan.api_key.as_deref()).await,
    };
    let target = Target {
        client,
        url: plan.url(),
        api: ApiKind::Chat,
        model: model.clone(),
        api_key: plan.api_key.clone(),
        min_tokens: None,
        ignore_eos: plan.ignore_eos,
        timeout: plan.timeout,
        ttft_slo_ms: None,
    };
    let result = runner::run_conversations(&plan, target, progress_bar(&plan)).await;
    let report = MultiTurnReport::build(&plan, &model, &result);
    write_outputs(&plan, &report)?;
    if report.successful_requests == 0 {
        let first_error = report
            .errors
            .first()
            .map_or_else(String::new, |e| e.example.clone());
        return Err(BenchError::AllFailed {
            total: report.requests_sent,
            first_error,
        });
    }
    Ok(report)
}

/// [`run`] on a fresh multi-threaded Tokio runtime, for callers without one.
pub fn run_blocking(args: BenchArgs) -> Result<MultiTurnReport, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    runtime.block_on(run(args))
}

fn write_outputs(plan: &MultiTurnPlan, report: &MultiTurnReport) -> Result<(), BenchError> {
    if let Some(path) = &plan.json_out {
        let json = serde_json::to_string_pretty(report).map_err(BenchError::Serialize)?;
        std::fs::write(path, json + "\n").map_err(|source| BenchError::JsonOut {
            path: path.clone(),
            source,
        })?;
    }
    if let Some(path) = &plan.plot {
        let s = &report.shape;
        let title = format!(
            "kestrel bench --multi-turn: {} on {}{} ({} conversations x {} turns, {} at once)",
            report.model, plan.base_url, plan.endpoint, s.conversations, s.turns, s.concurrency
        );
        let points: Vec<TurnPoint> = report.per_turn.iter().map(turn_point).collect();
        plot::render_per_turn(&points, &title, path)?;
    }
    Ok(())
}

fn turn_point(t: &TurnStats) -> TurnPoint {
    TurnPoint {
        turn: t.turn,
        ttft_p50_ms: (t.ttft_ms.count > 0).then_some(t.ttft_ms.median_ms),
        ttft_p90_ms: (t.ttft_ms.count > 0).then_some(t.ttft_ms.p90_ms),
        ttft_mean_ms: (t.ttft_ms.count > 0).then_some(t.ttft_ms.mean_ms),
        hit_rate: t.prefix.hit_rate,
    }
}

fn progress_bar(plan: &MultiTurnPlan) -> ProgressBar {
    if !plan.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(plan.total_turns() as u64);
    let template = "{elapsed_precise} [{bar:40}] {pos}/{len} turns {msg}";
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
