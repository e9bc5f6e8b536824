//! Engine logprobs -> OpenAI wire logprobs (chat and legacy completions layouts).

use std::collections::HashMap;

use kestrel_engine::api::TokenEvent;
use kestrel_engine::sampling::TokenLogprob;
use kestrel_model::tokenizer::Tokenizer;

use crate::openai::wire::{ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob};

/// The text of one token on its own (special tokens included).
pub(crate) fn piece(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer.decode(&[id], false)
}

fn top(tokenizer: &Tokenizer, t: &TokenLogprob) -> TopLogprob {
    let token = piece(tokenizer, t.token);
    TopLogprob {
        bytes: token.as_bytes().to_vec(),
        token,
        logprob: t.logprob,
    }
}

/// Chat logprobs of `tokens` (those without logprobs are skipped).
pub fn chat(tokenizer: &Tokenizer, tokens: &[TokenEvent]) -> ChatLogprobs {
    let content = tokens
        .iter()
        .filter_map(|t| t.logprobs.as_ref())
        .map(|lp| {
            let chosen = top(tokenizer, &lp.chosen);
            ChatTokenLogprob {
                token: chosen.token,
                logprob: chosen.logprob,
                bytes: chosen.bytes,
                top_logprobs: lp.top.iter().map(|t| top(tokenizer, t)).collect(),
            }
        })
        .collect();
    ChatLogprobs { content }
}

/// Completions logprobs of `tokens`; `offset` is the text offset of the first token (for
/// streamed chunks), advanced past them.
pub fn completion(
    tokenizer: &Tokenizer,
    tokens: &[TokenEvent],
    offset: &mut usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for t in tokens {
        let Some(lp) = &t.logprobs else { continue };
        out.tokens.push(piece(tokenizer, lp.chosen.token));
        out.token_logprobs.push(lp.chosen.logprob);
        out.top_logprobs.push(
            lp.top
                .iter()
                .map(|a| (piece(tokenizer, a.token), a.logprob))
                .collect::<HashMap<_, _>>(),
        );
        out.text_offset.push(*offset);
        *offset += t.text.len();
    }
    out
}
