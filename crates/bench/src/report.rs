//! The benchmark result: [`BenchReport`], its JSON form (via `Serialize`) and its text table.
//!
//! Metrics mirror vLLM's `bench serve`: failed requests are excluded from every metric; token
//! totals and throughputs count successful requests only; TPOT is
//! `(e2e - ttft) / (output_tokens - 1)` per request with at least two tokens; ITL samples are
//! gaps between content chunks (see [`crate::measure`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::goodput::Goodput;
use crate::outcome::{Measured, RequestFailure};
use crate::plan::{ApiKind, LoadMode, Plan};
use crate::runner::LoadResult;
use crate::samples::Samples;
use crate::stats::LatencyStats;

/// Where a token total comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// Every successful request's `usage` reported it.
    Server,
    /// No request reported it: client-side estimate (word count, or content chunks).
    Estimated,
    /// Some requests reported it, others were estimated.
    Mixed,
}

impl TokenSource {
    fn of(reported: usize, total: usize) -> Self {
        match reported {
            0 => Self::Estimated,
            r if r == total => Self::Server,
            _ => Self::Mixed,
        }
    }
}

/// Failures of one kind, with one example message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorSummary {
    /// Label such as `http_429`, `http_500`, `timeout`, `transport`, `stream`.
    pub kind: String,
    /// Requests that failed this way.
    pub count: usize,
    /// The first such failure's message (HTTP status and start of the body, etc.).
    pub example: String,
}

/// Result of one `kestrel bench` run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    /// Server base URL.
    pub base_url: String,
    /// API path requested.
    pub endpoint: String,
    /// Body shape used (completions or chat).
    pub api: ApiKind,
    /// Model name sent.
    pub model: String,
    /// How requests were released.
    pub load: LoadMode,
    /// Seed of prompts and arrivals.
    pub seed: u64,
    /// Whether requests were sent with `ignore_eos` (false with --stop-at-eos).
    pub ignore_eos: bool,
    /// Requests sent.
    pub num_prompts: usize,
    /// Requests that streamed to `[DONE]` with text.
    pub successful_requests: usize,
    /// Requests that failed (HTTP error, timeout, broken stream).
    pub failed_requests: usize,
    /// Wall time of the load phase, seconds.
    pub duration_s: f64,
    /// Most requests in flight at once.
    pub peak_concurrency: usize,
    /// Prompt tokens of successful requests.
    pub total_input_tokens: u64,
    /// Whether `total_input_tokens` comes from `usage.prompt_tokens`.
    pub input_tokens_source: TokenSource,
    /// Generated tokens of successful requests.
    pub total_output_tokens: u64,
    /// Whether `total_output_tokens` comes from `usage.completion_tokens` or chunk counts.
    pub output_tokens_source: TokenSource,
    /// Successful requests per second.
    pub request_throughput: f64,
    /// Generated tokens per second.
    pub output_throughput: f64,
    /// Prompt plus generated tokens per second.
    pub total_token_throughput: f64,
    /// Time to first token.
    pub ttft_ms: LatencyStats,
    /// Time per output token after the first.
    pub tpot_ms: LatencyStats,
    /// Inter-token latency (gap between content chunks).
    pub itl_ms: LatencyStats,
    /// End-to-end request latency.
    pub e2el_ms: LatencyStats,
    /// Content chunks received by successful requests.
    pub content_chunks: u64,
    /// Successful requests whose token count exceeds their content chunks: some chunk carried
    /// several tokens, so those requests have fewer ITL samples than tokens - 1.
    pub multi_token_chunk_requests: usize,
    /// Successful requests that were sent twice because the server had closed the pooled
    /// connection of the first attempt (their timings are those of the second attempt).
    pub retried_requests: usize,
    /// Requests within the `--goodput` objectives, when given.
    pub goodput: Option<Goodput>,
    /// Failures grouped by kind.
    pub errors: Vec<ErrorSummary>,
    /// The raw samples behind the latency statistics (for `--plot`; not in the JSON).
    #[serde(skip)]
    pub samples: Samples,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl BenchReport {
    /// Aggregates the outcomes of a load phase.
    pub(crate) fn build(plan: &Plan, model: &str, load: &LoadResult) -> Self {
        let ok: Vec<&Measured> = load
            .outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok())
            .collect();
        let total_in: u64 = ok.iter().map(|m| m.prompt_tokens()).sum();
        let total_out: u64 = ok.iter().map(|m| m.output_tokens()).sum();
        let secs = load.duration.as_secs_f64().max(f64::MIN_POSITIVE);
        let in_reported = ok
            .iter()
            .filter(|m| m.usage_prompt_tokens.is_some())
            .count();
        let out_reported = ok
            .iter()
            .filter(|m| m.usage_completion_tokens.is_some())
            .count();
        let itl: Vec<f64> = ok
            .iter()
            .flat_map(|m| m.itl.iter().map(|d| ms(*d)))
            .collect();
        Self {
            base_url: plan.base_url.clone(),
            endpoint: plan.endpoint.clone(),
            api: plan.api,
            model: model.to_owned(),
            load: plan.load,
            seed: plan.seed,
            ignore_eos: plan.ignore_eos,
            num_prompts: load.outcomes.len(),
            successful_requests: ok.len(),
            failed_requests: load.outcomes.len() - ok.len(),
            duration_s: load.duration.as_secs_f64(),
            peak_concurrency: load.peak_in_flight,
            total_input_tokens: total_in,
            input_tokens_source: TokenSource::of(in_reported, ok.len()),
            total_output_tokens: total_out,
            output_tokens_source: TokenSource::of(out_reported, ok.len()),
            request_throughput: ok.len() as f64 / secs,
            output_throughput: total_out as f64 / secs,
            total_token_throughput: (total_in + total_out) as f64 / secs,
            ttft_ms: LatencyStats::from_ms(&ok.iter().map(|m| ms(m.ttft)).collect::<Vec<_>>()),
            tpot_ms: LatencyStats::from_ms(
                &ok.iter()
                    .filter_map(|m| m.tpot())
                    .map(ms)
                    .collect::<Vec<_>>(),
            ),
            itl_ms: LatencyStats::from_ms(&itl),
            e2el_ms: LatencyStats::from_ms(&ok.iter().map(|m| ms(m.e2e)).collect::<Vec<_>>()),
            content_chunks: ok.iter().map(|m| m.content_chunks).sum(),
            multi_token_chunk_requests: ok
                .iter()
                .filter(|m| m.output_tokens() > m.content_chunks)
                .count(),
            retried_requests: ok.iter().filter(|m| m.retried).count(),
            goodput: plan
                .goodput
                .map(|o| Goodput::of(o, ok.iter().copied(), secs)),
            errors: summarize_errors(load.outcomes.iter().filter_map(|o| o.as_ref().err())),
            samples: Samples::of(ok.iter().copied()),
        }
    }

    /// The report as a fixed-width text table (what `kestrel bench` prints).
    pub fn render_table(&self) -> String {
        let mut t = String::new();
        let line = |t: &mut String, k: &str, v: String| {
            // Writing to a String cannot fail.
            let _ = writeln!(t, "{k:<42}{v:>16}");
        };
        let _ = writeln!(t, "{:=^58}", " Serving Benchmark Result ");
        line(
            &mut t,
            "Endpoint:",
            format!("{}{}", self.base_url, self.endpoint),
        );
        line(&mut t, "Model:", self.model.clone());
        line(&mut t, "Load:", load_label(&self.load));
        line(
            &mut t,
            "Successful requests:",
            self.successful_requests.to_string(),
        );
        line(&mut t, "Failed requests:", self.failed_requests.to_string());
        line(
            &mut t,
            "Benchmark duration (s):",
            format!("{:.2}", self.duration_s),
        );
        line(
            &mut t,
            "Peak concurrent requests:",
            self.peak_concurrency.to_string(),
        );
        let src = |s: TokenSource| {
            if s == TokenSource::Server {
                ""
            } else {
                " (est.)"
            }
        };
        line(
            &mut t,
            &format!("Total input tokens{}:", src(self.input_tokens_source)),
            self.total_input_tokens.to_string(),
        );
        line(
            &mut t,
            &format!("Total generated tokens{}:", src(self.output_tokens_source)),
            self.total_output_tokens.to_string(),
        );
        line(
            &mut t,
            "Request throughput (req/s):",
            format!("{:.2}", self.request_throughput),
        );
        line(
            &mut t,
            "Output token throughput (tok/s):",
            format!("{:.2}", self.output_throughput),
        );
        line(
            &mut t,
            "Total token throughput (tok/s):",
            format!("{:.2}", self.total_token_throughput),
        );
        if let Some(g) = &self.goodput {
            line(
                &mut t,
                "Request goodput (req/s):",
                format!("{:.2}", g.request_goodput),
            );
            line(
                &mut t,
                "Requests within objectives:",
                g.good_requests.to_string(),
            );
        }
        self.render_latency(&mut t);
        self.render_notes(&mut t);
        let _ = writeln!(t, "{}", "=".repeat(58));
        t
    }

    fn render_latency(&self, t: &mut String) {
        let _ = writeln!(t, "{:-^58}", " Latency (ms) ");
        let _ = writeln!(
            t,
            "{:<6}{:>9}{:>9}{:>9}{:>9}{:>9}{:>8}",
            "", "mean", "median", "p90", "p95", "p99", "samples"
        );
        for (name, s) in [
            ("TTFT", &self.ttft_ms),
            ("TPOT", &self.tpot_ms),
            ("ITL", &self.itl_ms),
            ("E2EL", &self.e2el_ms),
        ] {
            if s.count == 0 {
                let _ = writeln!(
                    t,
                    "{name:<6}{:>9}{:>9}{:>9}{:>9}{:>9}{:>8}",
                    "-", "-", "-", "-", "-", 0
                );
                continue;
            }
            let _ = writeln!(
                t,
                "{name:<6}{:>9.2}{:>9.2}{:>9.2}{:>9.2}{:>9.2}{:>8}",
                s.mean_ms, s.median_ms, s.p90_ms, s.p95_ms, s.p99_ms, s.count
            );
        }
    }

    fn render_notes(&self, t: &mut String) {
        if self.multi_token_chunk_requests > 0 {
            let _ = writeln!(
                t,
                "note: {} request(s) had chunks carrying several tokens; ITL is per chunk",
                self.multi_token_chunk_requests
            );
        }
        if self.retried_requests > 0 {
            let _ = writeln!(
                t,
                "note: {} request(s) resent after the server closed a kept-alive connection",
                self.retried_requests
            );
        }
        if !self.errors.is_empty() {
            let _ = writeln!(t, "{:-^58}", " Errors ");
            for e in &self.errors {
                let _ = writeln!(t, "{:<10}{:>6}  {}", e.kind, e.count, e.example);
            }
        }
    }
}

pub(crate) fn load_label(load: &LoadMode) -> String {
    match load {
        LoadMode::Concurrency { concurrency } => format!("concurrency {concurrency}"),
        LoadMode::Poisson {
            request_rate,
            max_concurrency: Some(m),
        } => format!("{request_rate} req/s, max {m}"),
        LoadMode::Poisson {
            request_rate,
            max_concurrency: None,
        } => format!("{request_rate} req/s"),
    }
}

/// Failures grouped by [`RequestFailure::kind`], each with its first message.
pub(crate) fn summarize_errors<'a>(
    failures: impl IntoIterator<Item = &'a RequestFailure>,
) -> Vec<ErrorSummary> {
    let mut by_kind: BTreeMap<String, ErrorSummary> = BTreeMap::new();
    for failure in failures {
        by_kind
            .entry(failure.kind())
            .or_insert_with(|| ErrorSummary {
                kind: failure.kind(),
                count: 0,
                example: failure.to_string(),
            })
            .count += 1;
    }
    by_kind.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::BenchArgs;

    fn measured(ttft: u64, itl: &[u64], e2e: u64, usage: Option<u64>) -> Measured {
        Measured {
            ttft: Duration::from_millis(ttft),
            itl: itl.iter().map(|&m| Duration::from_millis(m)).collect(),
            e2e: Duration::from_millis(e2e),
            content_chunks: itl.len() as u64 + 1,
            usage_completion_tokens: usage,
            usage_prompt_tokens: usage.map(|_| 20),
            est_prompt_tokens: 10,
            retried: false,
            sent_at: Duration::ZERO,
        }
    }

    fn report() -> BenchReport {
        let args = BenchArgs {
            num_prompts: Some(4),
            input_len: 10,
            ..BenchArgs::default()
        };
        let plan = Plan::from_args(&args).unwrap();
        let load = LoadResult {
            outcomes: vec![
                Ok(measured(100, &[50, 50, 50], 250, Some(4))),
                Ok(measured(200, &[100], 300, Some(3))),
                Err(RequestFailure::Http {
                    status: 429,
                    body: "busy".into(),
                }),
                Err(RequestFailure::Http {
                    status: 429,
                    body: "busy again".into(),
                }),
            ],
            duration: Duration::from_secs(2),
            peak_in_flight: 1,
        };
        BenchReport::build(&plan, "m", &load)
    }

    #[test]
    fn aggregates_successes_only() {
        let r = report();
        assert_eq!(
            (r.successful_requests, r.failed_requests, r.num_prompts),
            (2, 2, 4)
        );
        assert_eq!((r.total_input_tokens, r.total_output_tokens), (40, 7));
        assert_eq!(
            (r.input_tokens_source, r.output_tokens_source),
            (TokenSource::Server, TokenSource::Server)
        );
        assert!((r.request_throughput - 1.0).abs() < 1e-9);
        assert!((r.output_throughput - 3.5).abs() < 1e-9);
        assert!((r.total_token_throughput - 23.5).abs() < 1e-9);
        assert!((r.ttft_ms.mean_ms - 150.0).abs() < 1e-9);
        // TPOT: (250-100)/3 = 50 and (300-200)/2 = 50.
        assert!((r.tpot_ms.mean_ms - 50.0).abs() < 1e-9);
        assert_eq!(r.itl_ms.count, 4);
        assert!((r.itl_ms.max_ms - 100.0).abs() < 1e-9);
        assert_eq!(r.multi_token_chunk_requests, 1, "3 tokens in 2 chunks");
        assert_eq!(r.errors.len(), 1);
        assert_eq!(
            (r.errors[0].kind.as_str(), r.errors[0].count),
            ("http_429", 2)
        );
        assert_eq!(r.errors[0].example, "HTTP 429: busy");
    }

    #[test]
    fn table_and_json_carry_the_numbers() {
        let r = report();
        let table = r.render_table();
        assert!(table.contains("Successful requests:"));
        assert!(table.contains("http_429"));
        assert!(table
            .lines()
            .any(|l| l.starts_with("TPOT") && l.contains("50.00")));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["failed_requests"], 2);
        assert_eq!(json["load"]["mode"], "concurrency");
        assert_eq!(json["ttft_ms"]["median_ms"], 150.0);
        assert_eq!(json["input_tokens_source"], "server");
    }

    #[test]
    fn goodput_counts_requests_within_objectives() {
        assert_eq!(report().goodput, None, "no --goodput, no goodput");
        let args = BenchArgs {
            num_prompts: Some(4),
            input_len: 10,
            goodput: Some("ttft:150".parse().unwrap()),
            ..BenchArgs::default()
        };
        let plan = Plan::from_args(&args).unwrap();
        let load = LoadResult {
            outcomes: vec![
                Ok(measured(100, &[50, 50, 50], 250, Some(4))),
                Ok(measured(200, &[100], 300, Some(3))),
            ],
            duration: Duration::from_secs(2),
            peak_in_flight: 2,
        };
        let r = BenchReport::build(&plan, "m", &load);
        let g = r.goodput.expect("goodput");
        assert_eq!(g.good_requests, 1, "only the 100 ms TTFT meets 150 ms");
        assert!((g.request_goodput - 0.5).abs() < 1e-9);
        assert!(r
            .render_table()
            .lines()
            .any(|l| l.starts_with("Request goodput (req/s):") && l.ends_with("0.50")));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["goodput"]["objectives"]["ttft_ms"], 150.0);
        assert_eq!(json["ttft_ms"]["p95_ms"], 195.0);
    }

    #[test]
    fn token_source_classification() {
        assert_eq!(TokenSource::of(0, 3), TokenSource::Estimated);
        assert_eq!(TokenSource::of(3, 3), TokenSource::Server);
        assert_eq!(TokenSource::of(1, 3), TokenSource::Mixed);
    }
}
