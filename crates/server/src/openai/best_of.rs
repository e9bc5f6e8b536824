//! [`CandidateRanking`]: from the `best_of` candidates generated for each prompt, the `n` with
//! the highest cumulative log-probability (sum of the chosen tokens' logprobs, as vLLM ranks
//! them), in that order; also applies `echo` and drops logprobs the client did not ask for.
//!
//! Candidates arrive prompt by prompt (`p * best_of + j`); the result is prompt by prompt too,
//! so choice `index = p * n + k`, OpenAI's order for a list of prompts.

use crate::submitted_choices::ChoiceOutput;
use crate::validation::ValidRequest;

/// How a request's candidates become its choices.
#[derive(Debug, Clone, Copy)]
pub struct CandidateRanking {
    pub n: usize,
    pub best_of: usize,
    /// Keep per-token logprobs in the output.
    pub keep_logprobs: bool,
}

impl CandidateRanking {
    /// The ranking `valid` asks for.
    pub fn of(valid: &ValidRequest) -> Self {
        CandidateRanking {
            n: valid.n,
            best_of: valid.best_of,
            keep_logprobs: valid.logprobs,
        }
    }

    /// The choices, in response order; `echo[p]` is prepended to prompt `p`'s texts.
    pub fn choices(
        &self,
        candidates: Vec<ChoiceOutput>,
        echo: &[Option<String>],
    ) -> Vec<ChoiceOutput> {
        let mut out = Vec::with_capacity(echo.len() * self.n);
        let mut rest = candidates.into_iter();
        for prefix in echo {
            let mut group: Vec<ChoiceOutput> = rest.by_ref().take(self.best_of).collect();
            if self.best_of > self.n {
                // Stable: equal scores keep generation order.
                group.sort_by(|a, b| cumulative_logprob(b).total_cmp(&cumulative_logprob(a)));
            }
            for mut choice in group.into_iter().take(self.n) {
                if let Some(prefix) = prefix {
                    choice.text.insert_str(0, prefix);
                }
                if !self.keep_logprobs {
                    for t in &mut choice.tokens {
                        t.logprobs = None;
                    }
                }
                out.push(choice);
            }
        }
        out
    }
}

/// Sum of the chosen tokens' logprobs (tokens without logprobs count 0).
pub fn cumulative_logprob(choice: &ChoiceOutput) -> f64 {
    choice
        .tokens
        .iter()
        .filter_map(|t| t.logprobs.as_ref())
        .map(|lp| f64::from(lp.chosen.logprob))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_engine::api::{RequestTimings, TokenEvent, Usage};
    use kestrel_engine::request::FinishReason;
    use kestrel_engine::sampling::{Logprobs, TokenLogprob};

    fn candidate(text: &str, logprobs: &[f32]) -> ChoiceOutput {
        let tokens = logprobs
            .iter()
            .map(|&lp| TokenEvent {
                id: 1,
                text: String::new(),
                logprobs: Some(Logprobs {
                    chosen: TokenLogprob {
                        token: 1,
                        logprob: lp,
                    },
                    top: Vec::new(),
                }),
            })
            .collect();
        ChoiceOutput {
            text: text.into(),
            tokens,
            reason: FinishReason::Length,
            usage: Usage::default(),
            timings: RequestTimings::default(),
        }
    }

    #[test]
    fn keeps_the_best_n_per_prompt_in_order() {
        let ranking = CandidateRanking {
            n: 2,
            best_of: 3,
            keep_logprobs: false,
        };
        let cands = vec![
            candidate("a", &[-1.0, -1.0]),
            candidate("b", &[-0.5]),
            candidate("c", &[-3.0]),
            candidate("d", &[-0.1]),
            candidate("e", &[-0.2, -0.2]),
            candidate("f", &[-0.3]),
        ];
        let out = ranking.choices(cands, &[Some("P:".into()), None]);
        let texts: Vec<&str> = out.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, vec!["P:b", "P:a", "d", "f"]);
        assert!(out
            .iter()
            .all(|c| c.tokens.iter().all(|t| t.logprobs.is_none())));
    }
}
