//! Command-line surface of `kestrel bench` ([`BenchArgs`], a `clap::Args` the CLI flattens).
//!
//! These are raw values; [`crate::plan::Plan::from_args`] checks them and turns them into the
//! validated plan the runner uses.

use std::path::PathBuf;

use clap::Parser;

/// Options of `kestrel bench`: target server, load shape, prompts and outputs.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct BenchArgs {
    /// Base URL of the OpenAI-compatible server.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub base_url: String,

    /// API path: /v1/completions or /v1/chat/completions (a path ending in
    /// `chat/completions` is sent chat messages, any other path a prompt).
    #[arg(long, default_value = "/v1/completions")]
    pub endpoint: String,

    /// Model name sent in the request body [default: first id of GET /v1/models, else "default"].
    #[arg(long)]
    pub model: Option<String>,

    /// Bearer token sent in the Authorization header.
    #[arg(long)]
    pub api_key: Option<String>,

    /// Fixed number of requests in flight [default: 1 when --request-rate is not given].
    /// With --multi-turn: conversations active at once [default: all of them].
    #[arg(long, conflicts_with = "request_rate")]
    pub concurrency: Option<usize>,

    /// Poisson arrivals at this many requests per second (exponential inter-arrival times).
    #[arg(long)]
    pub request_rate: Option<f64>,

    /// With --request-rate: cap on requests in flight (arrivals beyond it wait).
    #[arg(long, requires = "request_rate")]
    pub max_concurrency: Option<usize>,

    /// Number of requests [default: 100, or the number of lines of --prompts-file].
    #[arg(long)]
    pub num_prompts: Option<usize>,

    /// Seed for synthetic prompts and the arrival schedule.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Synthetic prompt length in tokens (approximated with one common word per token).
    /// With --multi-turn: the length of each new user message.
    #[arg(long, default_value_t = 128)]
    pub input_len: usize,

    /// Tokens to generate per request (sent as max_tokens, with ignore_eos unless
    /// --stop-at-eos). With --multi-turn: per reply.
    #[arg(long, default_value_t = 128)]
    pub output_len: u32,

    /// Let each request end at the model's end of sequence (ignore_eos false), so
    /// output_len is only a cap and throughput counts the tokens actually generated.
    #[arg(long)]
    pub stop_at_eos: bool,

    /// Also send min_tokens with this value (servers that support it stop no earlier).
    #[arg(long)]
    pub min_tokens: Option<u32>,

    /// JSONL prompts instead of synthetic ones: one {"prompt": "...", "output_len"?: n} per line.
    #[arg(long)]
    pub prompts_file: Option<PathBuf>,

    /// Per-request timeout in seconds (connection, generation and streaming together).
    #[arg(long, default_value_t = 300.0)]
    pub timeout: f64,

    /// Write the report as JSON to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,

    /// Do not draw the progress bar.
    #[arg(long)]
    pub no_progress: bool,

    /// Service-level objectives for goodput, in ms: e.g. `ttft:500,tpot:50` (also `e2el`).
    /// The report then counts the requests that met all of them.
    #[arg(long)]
    pub goodput: Option<crate::goodput::Objectives>,

    /// Draw latency CDFs (TTFT, TPOT/ITL, E2E) and output tokens/s over time to this file
    /// (`.svg` or `.png`, by its extension).
    #[arg(long)]
    pub plot: Option<PathBuf>,

    /// Send `ttft_slo_ms` (a first-token latency objective, a Kestrel extension) with every
    /// request; a server that predicts it cannot meet it answers 429 at once.
    #[arg(long)]
    pub ttft_slo_ms: Option<u64>,

    /// Multi-turn conversations on /v1/chat/completions instead of independent requests: each
    /// turn sends the whole history (earlier user messages and the replies the server returned)
    /// plus a new user message, and the report gives TTFT and prefix-cache hit rate per turn.
    #[arg(long, conflicts_with_all = [
        "request_rate", "num_prompts", "prompts_file", "goodput", "ttft_slo_ms", "min_tokens",
    ])]
    pub multi_turn: bool,

    /// With --multi-turn: number of conversations.
    #[arg(long, default_value_t = 8, requires = "multi_turn")]
    pub conversations: usize,

    /// With --multi-turn: user turns per conversation (each one request).
    #[arg(long, default_value_t = 4, requires = "multi_turn")]
    pub turns: usize,

    /// With --multi-turn: seconds a conversation waits after a reply before its next turn.
    #[arg(long, default_value_t = 0.0, requires = "multi_turn")]
    pub think_time: f64,

    /// With --multi-turn: tokens of a system message that opens every conversation (its own
    /// text per conversation), so the history is long from the first turn; 0 sends none.
    #[arg(long, default_value_t = 0, requires = "multi_turn")]
    pub multi_turn_prefix_tokens: usize,

    /// `compare a.json b.json`: print two saved reports side by side instead of running.
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
}

/// What `kestrel bench` does instead of a run.
#[derive(Debug, Clone, PartialEq, clap::Subcommand)]
pub enum BenchCommand {
    /// Print two `--json-out` reports side by side with b/a ratios.
    Compare {
        /// The first (baseline) report.
        a: PathBuf,
        /// The second report.
        b: PathBuf,
    },
}

/// Parser used only to materialize the declared defaults.
#[derive(Parser)]
struct DefaultsOnly {
    #[command(flatten)]
    args: BenchArgs,
}

impl Default for BenchArgs {
    /// The values `kestrel bench` gets with no flags.
    fn default() -> Self {
        // Invariant: BenchArgs has no required argument, so parsing an empty command line
        // cannot fail.
        DefaultsOnly::try_parse_from(["kestrel-bench"])
            .expect("BenchArgs has no required arguments")
            .args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<BenchArgs, clap::Error> {
        let mut full = vec!["bench"];
        full.extend_from_slice(argv);
        DefaultsOnly::try_parse_from(full).map(|d| d.args)
    }

    #[test]
    fn defaults() {
        let a = BenchArgs::default();
        assert_eq!(a.base_url, "http://127.0.0.1:8000");
        assert_eq!(a.endpoint, "/v1/completions");
        assert_eq!((a.input_len, a.output_len, a.seed), (128, 128, 0));
        assert_eq!(
            (a.concurrency, a.request_rate, a.num_prompts),
            (None, None, None)
        );
        assert_eq!(a.timeout, 300.0);
    }

    #[test]
    fn flags_parse() {
        let a = parse(&[
            "--request-rate",
            "2.5",
            "--max-concurrency",
            "3",
            "--num-prompts",
            "8",
        ]);
        let a = a.unwrap();
        assert_eq!(a.request_rate, Some(2.5));
        assert_eq!(a.max_concurrency, Some(3));
        assert_eq!(a.num_prompts, Some(8));
    }

    #[test]
    fn multi_turn_flags() {
        let a = parse(&[
            "--multi-turn",
            "--conversations",
            "16",
            "--turns",
            "6",
            "--think-time",
            "0.5",
            "--multi-turn-prefix-tokens",
            "1500",
        ])
        .unwrap();
        assert!(a.multi_turn);
        assert_eq!((a.conversations, a.turns), (16, 6));
        assert_eq!((a.think_time, a.multi_turn_prefix_tokens), (0.5, 1500));
        let d = BenchArgs::default();
        assert_eq!((d.multi_turn, d.conversations, d.turns), (false, 8, 4));
        assert!(parse(&["--turns", "3"]).is_err(), "needs --multi-turn");
        assert!(parse(&["--multi-turn", "--request-rate", "1"]).is_err());
        assert!(parse(&["--multi-turn", "--num-prompts", "4"]).is_err());
    }

    #[test]
    fn concurrency_conflicts_with_rate_and_max_needs_rate() {
        assert!(parse(&["--concurrency", "2", "--request-rate", "1"]).is_err());
        assert!(parse(&["--max-concurrency", "2"]).is_err());
        assert!(parse(&["--concurrency", "4"]).is_ok());
    }
}
