//! The result of `--multi-turn`: [`MultiTurnReport`], its JSON form (via `Serialize`) and its
//! text table.
//!
//! Turns are numbered from 1. The prefix hit rate of a set of turns is
//! `sum(cached_tokens) / sum(prompt_tokens)` over its successful requests that reported
//! `usage.prompt_tokens_details.cached_tokens` (a server that never reports it gets no rate).
//! "Later turns" are turns 2 and up: the ones whose history a prefix cache can serve. Failed
//! requests are left out of every latency and token figure, as in the main report.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::conversation::{TurnRecord, TurnResult};
use super::plan::{MultiTurnPlan, MultiTurnShape};
use super::runner::MultiTurnResult;
use crate::report::{summarize_errors, ErrorSummary};
use crate::stats::LatencyStats;

/// Prompt and cached tokens of a set of turns, and the hit rate they give.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PrefixHits {
    /// Prompt tokens of the successful requests that reported cached tokens.
    pub prompt_tokens: u64,
    /// Cached tokens they reported.
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens`; `None` when no request reported cached tokens.
    pub hit_rate: Option<f64>,
}

impl PrefixHits {
    fn of<'a>(results: impl IntoIterator<Item = &'a TurnResult>) -> Self {
        let (mut prompt, mut cached, mut reported) = (0, 0, 0);
        for r in results {
            if let Some(c) = r.cached_tokens {
                prompt += r.measured.prompt_tokens();
                cached += c;
                reported += 1;
            }
        }
        Self {
            prompt_tokens: prompt,
            cached_tokens: cached,
            hit_rate: (reported > 0 && prompt > 0).then(|| cached as f64 / prompt as f64),
        }
    }
}

/// The figures of one turn index across all conversations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnStats {
    /// The turn, from 1.
    pub turn: usize,
    /// Requests sent for this turn.
    pub requests: usize,
    /// Those that failed.
    pub failed: usize,
    /// Time to first token of the successful ones.
    pub ttft_ms: LatencyStats,
    /// Mean prompt tokens of the successful ones (the history grows with the turn).
    pub mean_prompt_tokens: f64,
    /// Prefix-cache hits of the successful ones.
    pub prefix: PrefixHits,
}

/// Result of one `kestrel bench --multi-turn` run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiTurnReport {
    /// Server base URL.
    pub base_url: String,
    /// Chat API path requested.
    pub endpoint: String,
    /// Model name sent.
    pub model: String,
    /// Conversations, turns, concurrency, think time and message lengths.
    pub shape: MultiTurnShape,
    /// Seed of the synthetic messages.
    pub seed: u64,
    /// Whether replies were sent with `ignore_eos` (false with --stop-at-eos).
    pub ignore_eos: bool,
    /// Requests sent (turns of conversations that had not stopped).
    pub requests_sent: usize,
    /// Requests that streamed to `[DONE]` with text.
    pub successful_requests: usize,
    /// Requests that failed (HTTP error, timeout, broken stream).
    pub failed_requests: usize,
    /// Turns never sent because an earlier turn of their conversation failed.
    pub skipped_turns: usize,
    /// Wall time of the run, seconds.
    pub duration_s: f64,
    /// Prompt tokens of successful requests (server's count, else words).
    pub total_input_tokens: u64,
    /// Generated tokens of successful requests.
    pub total_output_tokens: u64,
    /// Successful requests per second.
    pub request_throughput: f64,
    /// Generated tokens per second.
    pub output_throughput: f64,
    /// Time to first token over all turns.
    pub ttft_ms: LatencyStats,
    /// Time to first token over turns 2 and up.
    pub ttft_ms_later_turns: LatencyStats,
    /// Prefix-cache hits over all turns.
    pub prefix_all_turns: PrefixHits,
    /// Prefix-cache hits over turns 2 and up.
    pub prefix_later_turns: PrefixHits,
    /// `prefix_later_turns.hit_rate`, at the top level for scripts.
    pub prefix_hit_rate_later_turns: Option<f64>,
    /// Figures per turn index.
    pub per_turn: Vec<TurnStats>,
    /// Failures grouped by kind.
    pub errors: Vec<ErrorSummary>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn ttft_stats<'a>(results: impl IntoIterator<Item = &'a TurnResult>) -> LatencyStats {
    let samples: Vec<f64> = results.into_iter().map(|r| ms(r.measured.ttft)).collect();
    LatencyStats::from_ms(&samples)
}

fn successes<'a>(
    records: &'a [TurnRecord],
    keep: impl Fn(usize) -> bool + Clone + 'a,
) -> impl Iterator<Item = &'a TurnResult> + Clone + 'a {
    records
        .iter()
        .filter(move |r| keep(r.turn))
        .filter_map(|r| r.outcome.as_ref().ok())
}

impl MultiTurnReport {
    /// Aggregates the turns of a run.
    pub(crate) fn build(plan: &MultiTurnPlan, model: &str, result: &MultiTurnResult) -> Self {
        let records = &result.records;
        let ok = successes(records, |_| true);
        let later = successes(records, |t| t >= 1);
        let total_in: u64 = ok.clone().map(|r| r.measured.prompt_tokens()).sum();
        let total_out: u64 = ok.clone().map(|r| r.measured.output_tokens()).sum();
        let succeeded = ok.clone().count();
        let secs = result.duration.as_secs_f64().max(f64::MIN_POSITIVE);
        let prefix_later_turns = PrefixHits::of(later.clone());
        Self {
            base_url: plan.base_url.clone(),
            endpoint: plan.endpoint.clone(),
            model: model.to_owned(),
            shape: plan.shape,
            seed: plan.seed,
            ignore_eos: plan.ignore_eos,
            requests_sent: records.len(),
            successful_requests: succeeded,
            failed_requests: records.len() - succeeded,
            skipped_turns: plan.total_turns().saturating_sub(records.len()),
            duration_s: result.duration.as_secs_f64(),
            total_input_tokens: total_in,
            total_output_tokens: total_out,
            request_throughput: succeeded as f64 / secs,
            output_throughput: total_out as f64 / secs,
            ttft_ms: ttft_stats(ok.clone()),
            ttft_ms_later_turns: ttft_stats(later),
            prefix_all_turns: PrefixHits::of(ok),
            prefix_later_turns,
            prefix_hit_rate_later_turns: prefix_later_turns.hit_rate,
            per_turn: (0..plan.shape.turns)
                .map(|t| turn_stats(records, t))
                .collect(),
            errors: summarize_errors(records.iter().filter_map(|r| r.outcome.as_ref().err())),
        }
    }

    /// The report as a fixed-width text table (what `kestrel bench --multi-turn` prints).
    pub fn render_table(&self) -> String {
        let mut t = String::new();
        let s = &self.shape;
        let line = |t: &mut String, k: &str, v: String| {
            // Writing to a String cannot fail.
            let _ = writeln!(t, "{k:<42}{v:>16}");
        };
        let _ = writeln!(t, "{:=^58}", " Multi-turn Benchmark Result ");
        line(
            &mut t,
            "Endpoint:",
            format!("{}{}", self.base_url, self.endpoint),
        );
        line(&mut t, "Model:", self.model.clone());
        let convs = format!("{} x {} turns", s.conversations, s.turns);
        line(&mut t, "Conversations:", convs);
        line(
            &mut t,
            "Concurrent conversations:",
            s.concurrency.to_string(),
        );
        line(&mut t, "Think time (s):", format!("{:.2}", s.think_time_s));
        let lens = format!("{}/{}/{}", s.prefix_tokens, s.user_tokens, s.max_tokens);
        line(&mut t, "Prefix/user/reply tokens:", lens);
        line(
            &mut t,
            "Successful requests:",
            self.successful_requests.to_string(),
        );
        line(&mut t, "Failed requests:", self.failed_requests.to_string());
        line(&mut t, "Skipped turns:", self.skipped_turns.to_string());
        line(
            &mut t,
            "Benchmark duration (s):",
            format!("{:.2}", self.duration_s),
        );
        line(
            &mut t,
            "Total input tokens:",
            self.total_input_tokens.to_string(),
        );
        line(
            &mut t,
            "Total generated tokens:",
            self.total_output_tokens.to_string(),
        );
        let req = format!("{:.2}", self.request_throughput);
        line(&mut t, "Request throughput (req/s):", req);
        let out = format!("{:.2}", self.output_throughput);
        line(&mut t, "Output token throughput (tok/s):", out);
        line(
            &mut t,
            "TTFT p50, turns >= 2 (ms):",
            format!("{:.2}", self.ttft_ms_later_turns.median_ms),
        );
        line(
            &mut t,
            "Prefix hit rate, turns >= 2:",
            rate(self.prefix_later_turns.hit_rate),
        );
        line(
            &mut t,
            "Prefix hit rate, all turns:",
            rate(self.prefix_all_turns.hit_rate),
        );
        self.render_turns(&mut t);
        if !self.errors.is_empty() {
            let _ = writeln!(t, "{:-^58}", " Errors ");
            for e in &self.errors {
                let _ = writeln!(t, "{:<10}{:>6}  {}", e.kind, e.count, e.example);
            }
        }
        let _ = writeln!(t, "{}", "=".repeat(58));
        t
    }

    fn render_turns(&self, t: &mut String) {
        let _ = writeln!(t, "{:-^58}", " Per turn (TTFT in ms) ");
        let _ = writeln!(
            t,
            "{:<5}{:>5}{:>5}{:>8} {:>10} {:>10} {:>10}{:>8}",
            "turn", "ok", "fail", "prompt", "p50", "p90", "mean", "hit"
        );
        for ts in &self.per_turn {
            let _ = writeln!(
                t,
                // A space before each time keeps columns apart past 100 s.
                "{:<5}{:>5}{:>5}{:>8.0} {:>10.2} {:>10.2} {:>10.2}{:>8}",
                ts.turn,
                ts.requests - ts.failed,
                ts.failed,
                ts.mean_prompt_tokens,
                ts.ttft_ms.median_ms,
                ts.ttft_ms.p90_ms,
                ts.ttft_ms.mean_ms,
                rate(ts.prefix.hit_rate)
            );
        }
    }
}

/// A hit rate as a percentage, `-` when unknown.
fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", r * 100.0))
}

fn turn_stats(records: &[TurnRecord], turn: usize) -> TurnStats {
    let sent = records.iter().filter(|r| r.turn == turn).count();
    let ok: Vec<&TurnResult> = successes(records, move |t| t == turn).collect();
    let prompt: u64 = ok.iter().map(|r| r.measured.prompt_tokens()).sum();
    TurnStats {
        turn: turn + 1,
        requests: sent,
        failed: sent - ok.len(),
        ttft_ms: ttft_stats(ok.iter().copied()),
        mean_prompt_tokens: prompt as f64 / ok.len().max(1) as f64,
        prefix: PrefixHits::of(ok.iter().copied()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::BenchArgs;
    use crate::outcome::{Measured, RequestFailure};

    fn ok(conversation: usize, turn: usize, ttft: u64, prompt: u64, cached: u64) -> TurnRecord {
        let measured = Measured {
            ttft: Duration::from_millis(ttft),
            itl: vec![Duration::from_millis(10)],
            e2e: Duration::from_millis(ttft + 10),
            content_chunks: 2,
            usage_completion_tokens: Some(4),
            usage_prompt_tokens: Some(prompt),
            est_prompt_tokens: 1,
            retried: false,
            sent_at: Duration::ZERO,
        };
        TurnRecord {
            conversation,
            turn,
            outcome: Ok(TurnResult {
                measured,
                cached_tokens: Some(cached),
            }),
        }
    }

    fn failed(conversation: usize, turn: usize) -> TurnRecord {
        TurnRecord {
            conversation,
            turn,
            outcome: Err(RequestFailure::Http {
                status: 503,
                body: "no worker".into(),
            }),
        }
    }

    fn plan() -> MultiTurnPlan {
        let args = BenchArgs {
            multi_turn: true,
            conversations: 2,
            turns: 3,
            ..BenchArgs::default()
        };
        MultiTurnPlan::from_args(&args).unwrap()
    }

    /// Conversation 0 runs all three turns; conversation 1 fails its second turn and stops.
    fn report() -> MultiTurnReport {
        let records = vec![
            ok(0, 0, 100, 100, 0),
            ok(0, 1, 40, 200, 150),
            ok(0, 2, 60, 300, 250),
            ok(1, 0, 300, 100, 20),
            failed(1, 1),
        ];
        let result = MultiTurnResult {
            records,
            duration: Duration::from_secs(2),
        };
        MultiTurnReport::build(&plan(), "m", &result)
    }

    #[test]
    fn counts_failures_and_skipped_turns() {
        let r = report();
        assert_eq!((r.requests_sent, r.successful_requests), (5, 4));
        assert_eq!((r.failed_requests, r.skipped_turns), (1, 1));
        assert_eq!((r.total_input_tokens, r.total_output_tokens), (700, 16));
        assert!((r.request_throughput - 2.0).abs() < 1e-9);
        assert!((r.output_throughput - 8.0).abs() < 1e-9);
        assert_eq!(r.errors.len(), 1);
        assert_eq!(
            (r.errors[0].kind.as_str(), r.errors[0].count),
            ("http_503", 1)
        );
    }

    #[test]
    fn per_turn_ttft_and_hit_rates() {
        let r = report();
        assert_eq!(r.per_turn.len(), 3);
        let t1 = &r.per_turn[0];
        assert_eq!((t1.turn, t1.requests, t1.failed), (1, 2, 0));
        assert!((t1.ttft_ms.median_ms - 200.0).abs() < 1e-9);
        assert_eq!(t1.prefix.hit_rate, Some(0.1), "20 of 200");
        let t2 = &r.per_turn[1];
        assert_eq!((t2.requests, t2.failed, t2.ttft_ms.count), (2, 1, 1));
        assert_eq!(t2.prefix.hit_rate, Some(0.75));
        assert_eq!(r.per_turn[2].mean_prompt_tokens, 300.0);
        // Turns >= 2: (150 + 250) / (200 + 300).
        assert_eq!(r.prefix_hit_rate_later_turns, Some(0.8));
        assert_eq!(r.prefix_later_turns.cached_tokens, 400);
        assert!((r.ttft_ms_later_turns.median_ms - 50.0).abs() < 1e-9);
        assert_eq!(r.ttft_ms.count, 4);
        // All turns: 420 / 700.
        assert_eq!(r.prefix_all_turns.hit_rate, Some(0.6));
    }

    #[test]
    fn no_cached_tokens_reported_means_no_rate() {
        let mut rec = ok(0, 1, 10, 50, 0);
        if let Ok(t) = &mut rec.outcome {
            t.cached_tokens = None;
        }
        let hits = PrefixHits::of(rec.outcome.as_ref().ok());
        assert_eq!((hits.prompt_tokens, hits.hit_rate), (0, None));
    }

    #[test]
    fn table_and_json_carry_the_numbers() {
        let r = report();
        let table = r.render_table();
        assert!(table.contains("Prefix hit rate, turns >= 2:"), "{table}");
        assert!(table.lines().any(|l| l.ends_with("80.0%")), "{table}");
        assert!(table.contains("http_503"));
        let row2 = table
            .lines()
            .find(|l| l.starts_with("2 "))
            .expect("turn 2 row");
        assert!(row2.contains("40.00") && row2.contains("75.0%"), "{row2}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["failed_requests"], 1);
        assert_eq!(json["prefix_hit_rate_later_turns"], 0.8);
        assert_eq!(json["ttft_ms_later_turns"]["median_ms"], 50.0);
        assert_eq!(json["per_turn"][1]["prefix"]["cached_tokens"], 150);
        assert_eq!(json["shape"]["conversations"], 2);
    }
}
