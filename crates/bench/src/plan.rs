//! Validation: [`BenchArgs`] (raw flags) become a [`Plan`] (checked values, prompts loaded).
//!
//! This is the only place that inspects raw arguments; the runner and the report trust a plan.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::args::BenchArgs;
use crate::error::BenchError;
use crate::prompts::{self, PromptSpec};

/// Default number of requests for synthetic prompts.
const DEFAULT_NUM_PROMPTS: usize = 100;

/// Request body shape, chosen from the endpoint path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiKind {
    /// `/v1/completions`: `{"prompt": ...}`, text in `choices[0].text`.
    Completions,
    /// `/v1/chat/completions`: `{"messages": [...]}`, text in `choices[0].delta.content`.
    Chat,
}

/// How requests are released.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum LoadMode {
    /// A fixed number of requests in flight; a new one starts when one finishes.
    Concurrency {
        /// Requests in flight.
        concurrency: usize,
    },
    /// Poisson arrivals, optionally capped in flight.
    Poisson {
        /// Mean arrivals per second.
        request_rate: f64,
        /// Cap on requests in flight, if any.
        max_concurrency: Option<usize>,
    },
}

/// A checked benchmark configuration.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub base_url: String,
    pub endpoint: String,
    pub url: String,
    pub api: ApiKind,
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub load: LoadMode,
    pub prompts: Vec<PromptSpec>,
    pub min_tokens: Option<u32>,
    pub ignore_eos: bool,
    pub timeout: Duration,
    pub seed: u64,
    pub json_out: Option<PathBuf>,
    pub progress: bool,
    pub goodput: Option<crate::goodput::Objectives>,
    pub plot: Option<PathBuf>,
    pub ttft_slo_ms: Option<u64>,
}

/// `--plot`, refused before the run when its format cannot be written.
fn plot_path(args: &BenchArgs) -> Result<Option<PathBuf>, BenchError> {
    let Some(path) = &args.plot else {
        return Ok(None);
    };
    crate::plot::check_path(path)?;
    Ok(Some(path.clone()))
}

fn invalid(msg: impl Into<String>) -> BenchError {
    BenchError::InvalidArgs(msg.into())
}

impl Plan {
    /// Checks every flag and loads or generates the prompts.
    pub fn from_args(args: &BenchArgs) -> Result<Self, BenchError> {
        let base_url = args.base_url.trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(invalid(format!(
                "--base-url must start with http:// or https://, got {base_url:?}"
            )));
        }
        if !args.endpoint.starts_with('/') {
            return Err(invalid(format!(
                "--endpoint must start with '/', got {:?}",
                args.endpoint
            )));
        }
        let api = match args
            .endpoint
            .trim_end_matches('/')
            .ends_with("chat/completions")
        {
            true => ApiKind::Chat,
            false => ApiKind::Completions,
        };
        if !(args.timeout.is_finite() && args.timeout > 0.0) {
            return Err(invalid("--timeout must be a positive number of seconds"));
        }
        Ok(Self {
            url: format!("{base_url}{}", args.endpoint),
            base_url,
            endpoint: args.endpoint.clone(),
            api,
            model: args.model.clone(),
            api_key: args.api_key.clone(),
            load: load_mode(args)?,
            prompts: load_prompts(args)?,
            min_tokens: args.min_tokens,
            ignore_eos: !args.stop_at_eos,
            timeout: Duration::from_secs_f64(args.timeout),
            seed: args.seed,
            json_out: args.json_out.clone(),
            progress: !args.no_progress,
            goodput: args.goodput,
            plot: plot_path(args)?,
            ttft_slo_ms: match args.ttft_slo_ms {
                Some(0) => return Err(invalid("--ttft-slo-ms must be at least 1")),
                ms => ms,
            },
        })
    }

    /// Most requests that can be in flight at once (sizes the connection pool).
    pub fn max_in_flight(&self) -> usize {
        match self.load {
            LoadMode::Concurrency { concurrency } => concurrency,
            LoadMode::Poisson {
                max_concurrency, ..
            } => max_concurrency.unwrap_or(self.prompts.len()),
        }
    }
}

fn load_mode(args: &BenchArgs) -> Result<LoadMode, BenchError> {
    match (args.request_rate, args.concurrency) {
        (Some(_), Some(_)) => Err(invalid(
            "--concurrency and --request-rate exclude each other",
        )),
        (Some(rate), None) => {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(invalid("--request-rate must be a positive, finite number"));
            }
            if args.max_concurrency == Some(0) {
                return Err(invalid("--max-concurrency must be at least 1"));
            }
            Ok(LoadMode::Poisson {
                request_rate: rate,
                max_concurrency: args.max_concurrency,
            })
        }
        (None, concurrency) => {
            if args.max_concurrency.is_some() {
                return Err(invalid(
                    "--max-concurrency needs --request-rate (use --concurrency)",
                ));
            }
            match concurrency.unwrap_or(1) {
                0 => Err(invalid("--concurrency must be at least 1")),
                n => Ok(LoadMode::Concurrency { concurrency: n }),
            }
        }
    }
}

fn load_prompts(args: &BenchArgs) -> Result<Vec<PromptSpec>, BenchError> {
    if args.num_prompts == Some(0) {
        return Err(invalid("--num-prompts must be at least 1"));
    }
    if args.output_len == 0 {
        return Err(invalid("--output-len must be at least 1"));
    }
    match &args.prompts_file {
        Some(path) => prompts::from_jsonl(path, args.num_prompts, args.output_len),
        None if args.input_len == 0 => Err(invalid("--input-len must be at least 1")),
        None => {
            let n = args.num_prompts.unwrap_or(DEFAULT_NUM_PROMPTS);
            Ok(prompts::synthetic(
                n,
                args.input_len,
                args.output_len,
                args.seed,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> BenchArgs {
        BenchArgs {
            num_prompts: Some(3),
            input_len: 4,
            ..BenchArgs::default()
        }
    }

    #[test]
    fn defaults_give_concurrency_one_completions() {
        let p = Plan::from_args(&args()).unwrap();
        assert_eq!(p.load, LoadMode::Concurrency { concurrency: 1 });
        assert_eq!(p.api, ApiKind::Completions);
        assert_eq!(p.url, "http://127.0.0.1:8000/v1/completions");
        assert_eq!(p.prompts.len(), 3);
        assert_eq!(p.max_in_flight(), 1);
    }

    #[test]
    fn chat_endpoint_and_trailing_slash() {
        let a = BenchArgs {
            base_url: "http://h:1/".into(),
            endpoint: "/v1/chat/completions".into(),
            ..args()
        };
        let p = Plan::from_args(&a).unwrap();
        assert_eq!(
            (p.api, p.url.as_str()),
            (ApiKind::Chat, "http://h:1/v1/chat/completions")
        );
    }

    #[test]
    fn poisson_mode_and_in_flight_bound() {
        let a = BenchArgs {
            request_rate: Some(2.0),
            max_concurrency: Some(2),
            ..args()
        };
        let p = Plan::from_args(&a).unwrap();
        assert_eq!(
            p.load,
            LoadMode::Poisson {
                request_rate: 2.0,
                max_concurrency: Some(2)
            }
        );
        assert_eq!(p.max_in_flight(), 2);
        let unbounded = Plan::from_args(&BenchArgs {
            max_concurrency: None,
            ..a
        })
        .unwrap();
        assert_eq!(unbounded.max_in_flight(), 3);
    }

    #[test]
    fn rejects_bad_values() {
        let bad = [
            BenchArgs {
                base_url: "127.0.0.1:8000".into(),
                ..args()
            },
            BenchArgs {
                endpoint: "v1/completions".into(),
                ..args()
            },
            BenchArgs {
                concurrency: Some(0),
                ..args()
            },
            BenchArgs {
                request_rate: Some(0.0),
                ..args()
            },
            BenchArgs {
                request_rate: Some(f64::INFINITY),
                ..args()
            },
            BenchArgs {
                max_concurrency: Some(2),
                ..args()
            },
            BenchArgs {
                num_prompts: Some(0),
                ..args()
            },
            BenchArgs {
                output_len: 0,
                ..args()
            },
            BenchArgs {
                input_len: 0,
                ..args()
            },
            BenchArgs {
                timeout: -1.0,
                ..args()
            },
        ];
        for a in bad {
            assert!(
                matches!(Plan::from_args(&a), Err(BenchError::InvalidArgs(_))),
                "{a:?}"
            );
        }
    }
}
