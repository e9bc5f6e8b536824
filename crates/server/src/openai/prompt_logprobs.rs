//! vLLM's `prompt_logprobs`: the log-probability of every prompt token given the ones before
//! it, with alternatives, computed by the backend in one pass over each prompt before the
//! request is submitted, and shaped for the wire (token ids as keys, rank and decoded text).

use std::collections::BTreeMap;

use kestrel_engine::prompt_pass::PromptTokenScore;
use kestrel_model::tokenizer::Tokenizer;

use crate::blocking;
use crate::error::ApiError;
use crate::openai::logprobs::piece;
use crate::openai::wire::{PromptLogprob, PromptLogprobs};
use crate::state::AppState;
use crate::validation::ValidRequest;

/// Per prompt of `valid`, its prompt logprobs; empty when the request did not ask for them.
pub async fn compute(
    state: &AppState,
    valid: &ValidRequest,
) -> Result<Vec<PromptLogprobs>, ApiError> {
    let Some(top_n) = valid.prompt_logprobs else {
        return Ok(Vec::new());
    };
    let prompts: Vec<_> = valid
        .prompts
        .iter()
        .map(|p| (p.request.prompt_ids().to_vec(), p.request.adapter()))
        .collect();
    let worker = state.clone();
    blocking::run(move || {
        prompts
            .into_iter()
            .map(|(ids, adapter)| {
                let scores = worker.backend().prompt_logprobs(ids, top_n, adapter)?;
                Ok(to_wire(worker.tokenizer(), scores))
            })
            .collect()
    })
    .await
}

/// Engine scores as vLLM's list: `null` for the first token.
fn to_wire(tokenizer: &Tokenizer, scores: Vec<Option<PromptTokenScore>>) -> PromptLogprobs {
    scores
        .into_iter()
        .map(|s| s.map(|s| entries(tokenizer, &s)))
        .collect()
}

/// The alternatives (ranked by position) and the prompt token itself (with its own rank).
fn entries(tokenizer: &Tokenizer, s: &PromptTokenScore) -> BTreeMap<String, PromptLogprob> {
    let entry = |token: u32, logprob: f32, rank: usize| {
        let e = PromptLogprob {
            logprob,
            rank,
            decoded_token: piece(tokenizer, token),
        };
        (token.to_string(), e)
    };
    let mut map: BTreeMap<_, _> = s
        .logprobs
        .top
        .iter()
        .enumerate()
        .map(|(i, t)| entry(t.token, t.logprob, i + 1))
        .collect();
    let chosen = s.logprobs.chosen;
    let (key, e) = entry(chosen.token, chosen.logprob, s.rank);
    map.insert(key, e);
    map
}
