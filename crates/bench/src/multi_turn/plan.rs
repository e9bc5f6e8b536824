//! Validation for `--multi-turn`: [`BenchArgs`] become a [`MultiTurnPlan`] holding every
//! conversation's script (its system message and user messages), generated from the seed.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::args::BenchArgs;
use crate::error::BenchError;
use crate::prompts;

/// The endpoint `--multi-turn` uses when `--endpoint` is left at its completions default.
const CHAT_ENDPOINT: &str = "/v1/chat/completions";

/// The messages one conversation sends: an optional system message, then one user message per
/// turn. The assistant messages come from the server's replies while the conversation runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConversationScript {
    /// Index of the conversation, from 0.
    pub id: usize,
    /// The opening system message (`--multi-turn-prefix-tokens` words), if any.
    pub system: Option<String>,
    /// One user message per turn.
    pub user_turns: Vec<String>,
}

/// The shape of a multi-turn run, as the report shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MultiTurnShape {
    /// Conversations in the run.
    pub conversations: usize,
    /// User turns per conversation.
    pub turns: usize,
    /// Conversations active at once.
    pub concurrency: usize,
    /// Seconds between a reply and the conversation's next turn.
    pub think_time_s: f64,
    /// Words of the opening system message (about one token each).
    pub prefix_tokens: usize,
    /// Words of each user message (about one token each).
    pub user_tokens: usize,
    /// `max_tokens` of each reply.
    pub max_tokens: u32,
}

/// A checked multi-turn benchmark configuration.
#[derive(Debug, Clone)]
pub(crate) struct MultiTurnPlan {
    pub base_url: String,
    pub endpoint: String,
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub shape: MultiTurnShape,
    pub think_time: Duration,
    pub ignore_eos: bool,
    pub timeout: Duration,
    pub seed: u64,
    pub json_out: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub progress: bool,
    pub scripts: Vec<ConversationScript>,
}

fn invalid(msg: impl Into<String>) -> BenchError {
    BenchError::InvalidArgs(msg.into())
}

impl MultiTurnPlan {
    /// Checks the flags that matter to `--multi-turn` and writes every conversation's script.
    pub fn from_args(args: &BenchArgs) -> Result<Self, BenchError> {
        let base_url = args.base_url.trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(invalid(format!(
                "--base-url must start with http:// or https://, got {base_url:?}"
            )));
        }
        let shape = shape(args)?;
        if !(args.timeout.is_finite() && args.timeout > 0.0) {
            return Err(invalid("--timeout must be a positive number of seconds"));
        }
        if let Some(path) = &args.plot {
            crate::plot::check_path(path)?;
        }
        Ok(Self {
            base_url,
            endpoint: chat_endpoint(&args.endpoint)?,
            model: args.model.clone(),
            api_key: args.api_key.clone(),
            think_time: Duration::from_secs_f64(shape.think_time_s),
            scripts: scripts(&shape, args.seed),
            shape,
            ignore_eos: !args.stop_at_eos,
            timeout: Duration::from_secs_f64(args.timeout),
            seed: args.seed,
            json_out: args.json_out.clone(),
            plot: args.plot.clone(),
            progress: !args.no_progress,
        })
    }

    /// The chat endpoint's full URL.
    pub fn url(&self) -> String {
        format!("{}{}", self.base_url, self.endpoint)
    }

    /// Requests the run sends when none fails.
    pub fn total_turns(&self) -> usize {
        self.shape.conversations * self.shape.turns
    }
}

/// `--endpoint` for chat: the completions default becomes the chat endpoint; any other path
/// must be a chat path.
fn chat_endpoint(endpoint: &str) -> Result<String, BenchError> {
    if endpoint == BenchArgs::default().endpoint {
        return Ok(CHAT_ENDPOINT.to_owned());
    }
    if endpoint.starts_with('/') && endpoint.trim_end_matches('/').ends_with("chat/completions") {
        return Ok(endpoint.to_owned());
    }
    Err(invalid(format!(
        "--multi-turn sends chat messages: --endpoint must be a chat/completions path, got {endpoint:?}"
    )))
}

fn shape(args: &BenchArgs) -> Result<MultiTurnShape, BenchError> {
    if args.conversations == 0 || args.turns == 0 {
        return Err(invalid("--conversations and --turns must be at least 1"));
    }
    if args.input_len == 0 || args.output_len == 0 {
        return Err(invalid("--input-len and --output-len must be at least 1"));
    }
    if !(args.think_time.is_finite() && args.think_time >= 0.0) {
        return Err(invalid(
            "--think-time must be a number of seconds, 0 or more",
        ));
    }
    let concurrency = match args.concurrency {
        Some(0) => return Err(invalid("--concurrency must be at least 1")),
        Some(n) => n.min(args.conversations),
        None => args.conversations,
    };
    Ok(MultiTurnShape {
        conversations: args.conversations,
        turns: args.turns,
        concurrency,
        think_time_s: args.think_time,
        prefix_tokens: args.multi_turn_prefix_tokens,
        user_tokens: args.input_len,
        max_tokens: args.output_len,
    })
}

/// Every conversation's messages: distinct synthetic texts, reproducible from `seed`.
fn scripts(shape: &MultiTurnShape, seed: u64) -> Vec<ConversationScript> {
    let systems = match shape.prefix_tokens {
        0 => vec![None; shape.conversations],
        n => prompts::synthetic(shape.conversations, n, shape.max_tokens, seed)
            .into_iter()
            .map(|p| Some(p.text))
            .collect(),
    };
    let mut users = prompts::synthetic(
        shape.conversations * shape.turns,
        shape.user_tokens,
        shape.max_tokens,
        seed.wrapping_add(1),
    )
    .into_iter()
    .map(|p| p.text);
    systems
        .into_iter()
        .enumerate()
        .map(|(id, system)| ConversationScript {
            id,
            system,
            user_turns: users.by_ref().take(shape.turns).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> BenchArgs {
        BenchArgs {
            multi_turn: true,
            conversations: 3,
            turns: 4,
            input_len: 5,
            output_len: 7,
            multi_turn_prefix_tokens: 20,
            ..BenchArgs::default()
        }
    }

    #[test]
    fn scripts_have_one_user_message_per_turn_and_a_system_prefix() {
        let p = MultiTurnPlan::from_args(&args()).unwrap();
        assert_eq!(p.scripts.len(), 3);
        assert_eq!(p.total_turns(), 12);
        for (i, s) in p.scripts.iter().enumerate() {
            assert_eq!(s.id, i);
            assert_eq!(s.user_turns.len(), 4);
            assert!(s.user_turns.iter().all(|u| u.split(' ').count() == 5));
            let system = s.system.as_deref().expect("a system message");
            assert_eq!(system.split(' ').count(), 20);
        }
        assert_ne!(p.scripts[0].system, p.scripts[1].system, "own text each");
        assert_ne!(p.scripts[0].user_turns[0], p.scripts[0].user_turns[1]);
        let again = MultiTurnPlan::from_args(&args()).unwrap();
        assert_eq!(p.scripts, again.scripts, "seeded");
        let other = MultiTurnPlan::from_args(&BenchArgs { seed: 9, ..args() }).unwrap();
        assert_ne!(p.scripts, other.scripts);
    }

    #[test]
    fn no_prefix_no_system_message() {
        let a = BenchArgs {
            multi_turn_prefix_tokens: 0,
            ..args()
        };
        let p = MultiTurnPlan::from_args(&a).unwrap();
        assert!(p.scripts.iter().all(|s| s.system.is_none()));
    }

    #[test]
    fn endpoint_concurrency_and_think_time() {
        let p = MultiTurnPlan::from_args(&args()).unwrap();
        assert_eq!(p.url(), "http://127.0.0.1:8000/v1/chat/completions");
        assert_eq!(
            p.shape.concurrency, 3,
            "all conversations at once by default"
        );
        let a = BenchArgs {
            concurrency: Some(2),
            think_time: 0.25,
            endpoint: "/openai/v1/chat/completions".into(),
            ..args()
        };
        let p = MultiTurnPlan::from_args(&a).unwrap();
        assert_eq!(p.shape.concurrency, 2);
        assert_eq!(p.think_time, Duration::from_millis(250));
        assert_eq!(p.endpoint, "/openai/v1/chat/completions");
        let capped = BenchArgs {
            concurrency: Some(50),
            ..args()
        };
        assert_eq!(
            MultiTurnPlan::from_args(&capped).unwrap().shape.concurrency,
            3
        );
    }

    #[test]
    fn rejects_bad_values() {
        let bad = [
            BenchArgs {
                conversations: 0,
                ..args()
            },
            BenchArgs { turns: 0, ..args() },
            BenchArgs {
                input_len: 0,
                ..args()
            },
            BenchArgs {
                think_time: -1.0,
                ..args()
            },
            BenchArgs {
                concurrency: Some(0),
                ..args()
            },
            BenchArgs {
                endpoint: "/v1/embeddings".into(),
                ..args()
            },
            BenchArgs {
                base_url: "localhost:8000".into(),
                ..args()
            },
        ];
        for a in bad {
            assert!(
                matches!(
                    MultiTurnPlan::from_args(&a),
                    Err(BenchError::InvalidArgs(_))
                ),
                "{a:?}"
            );
        }
    }
}
