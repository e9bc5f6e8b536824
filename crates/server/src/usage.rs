//! [`UsageTotal`]: the token usage of one request's choices, summed in one place.
//!
//! The request log's [`crate::request_log::Tally`] owns one and feeds it every `Finished`
//! event; the stream encoders (usage chunk) and the non-streaming responses read the total
//! from there. The prompt is counted once, completions are summed over the choices and the
//! cached prompt tokens are the best any choice got.

use kestrel_engine::api::Usage;

use crate::openai::wire::{CompletionTokensDetails, PromptTokensDetails, UsageInfo};

/// Usage of a request, accumulated over its choices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotal {
    total: Usage,
}

impl UsageTotal {
    /// Nothing generated yet for a prompt of `prompt_tokens` tokens.
    pub fn new(prompt_tokens: usize) -> UsageTotal {
        UsageTotal {
            total: Usage {
                prompt_tokens,
                ..Usage::default()
            },
        }
    }

    /// Adds one finished choice.
    pub fn add(&mut self, choice: &Usage) {
        self.total.completion_tokens += choice.completion_tokens;
        self.total.cached_tokens = self.total.cached_tokens.max(choice.cached_tokens);
    }

    /// The total so far.
    pub fn get(&self) -> Usage {
        self.total
    }
}

/// Usage on the OpenAI wire.
pub fn usage_info(u: Usage) -> UsageInfo {
    UsageInfo {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details: PromptTokensDetails {
            cached_tokens: u.cached_tokens,
        },
        completion_tokens_details: None,
    }
}

/// Usage on the OpenAI wire with the reasoning tokens broken out (`None`: the reply's
/// reasoning was not split, and no breakdown is shown).
pub fn usage_info_with_reasoning(u: Usage, reasoning_tokens: Option<usize>) -> UsageInfo {
    UsageInfo {
        completion_tokens_details: reasoning_tokens
            .map(|reasoning_tokens| CompletionTokensDetails { reasoning_tokens }),
        ..usage_info(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_once_completions_summed_cache_max() {
        let mut total = UsageTotal::new(7);
        for (completion_tokens, cached_tokens) in [(3, 0), (5, 4)] {
            total.add(&Usage {
                prompt_tokens: 7,
                completion_tokens,
                cached_tokens,
            });
        }
        let u = total.get();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (7, 8, 4)
        );
        assert_eq!(usage_info(u).total_tokens, 15);
    }
}
