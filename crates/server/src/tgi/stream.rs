//! TGI output: the `details` of a response and the SSE encoder of `/generate_stream`, one
//! event per token, the last carrying the whole text and `details`.

use kestrel_engine::api::{EngineEvent, TokenEvent};
use kestrel_engine::request::FinishReason;

use crate::error::ApiError;
use crate::request_log::Tally;
use crate::sse::{json, SseEncoder, SseFrame};
use crate::state::AppState;
use crate::tgi::wire::{GenerateDetails, StreamResponse, StreamToken, TgiErrorBody};
use crate::validation::ValidGenerate;

/// TGI's finish reason names.
fn finish_reason(reason: FinishReason, stops: bool) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Stop if stops => "stop_sequence",
        FinishReason::Stop | FinishReason::Abort | FinishReason::Error => "eos_token",
    }
}

/// The `details` of a finished request.
pub fn details(valid: &ValidGenerate, reason: FinishReason, generated: usize) -> GenerateDetails {
    let sampling = valid.request.sampling();
    GenerateDetails {
        finish_reason: finish_reason(reason, !sampling.stop.is_empty()).to_string(),
        generated_tokens: generated,
        seed: sampling.seed,
        input_length: valid.request.prompt_ids().len(),
    }
}

/// `generated_text`: the text, after the prompt when `return_full_text` asked for it.
pub fn full_text(valid: &ValidGenerate, text: String) -> String {
    match &valid.text_prefix {
        Some(prefix) => format!("{prefix}{text}"),
        None => text,
    }
}

/// Encodes one TGI stream. The final token event is held back until `Finished` arrives so it can
/// carry `generated_text` and `details`.
pub struct TgiEncoder {
    state: AppState,
    valid: ValidGenerate,
    text: String,
    count: usize,
    last: Option<TokenEvent>,
    /// The request's id, for error events.
    request_id: Option<String>,
}

impl TgiEncoder {
    /// An encoder for `valid`'s one choice.
    pub fn new(state: AppState, valid: ValidGenerate) -> TgiEncoder {
        TgiEncoder {
            state,
            valid,
            text: String::new(),
            count: 0,
            last: None,
            request_id: crate::request_id::current_string(),
        }
    }

    fn token(&self, t: &TokenEvent) -> (StreamToken, Vec<StreamToken>) {
        let tok = self.state.tokenizer();
        let special = tok.eos_ids().contains(&t.id) || tok.bos_id() == Some(t.id);
        let (logprob, top) = match &t.logprobs {
            Some(lp) => (
                lp.chosen.logprob,
                lp.top
                    .iter()
                    .map(|a| StreamToken {
                        id: a.token,
                        text: tok.decode(&[a.token], false),
                        logprob: a.logprob,
                        special: tok.eos_ids().contains(&a.token),
                    })
                    .collect(),
            ),
            None => (0.0, Vec::new()),
        };
        let token = StreamToken {
            id: t.id,
            text: t.text.clone(),
            logprob,
            special,
        };
        (token, top)
    }

    fn frame(&self, t: &TokenEvent, end: Option<(String, GenerateDetails)>) -> String {
        let (token, top_tokens) = self.token(t);
        let (generated_text, details) = match end {
            Some((text, d)) => (Some(text), Some(d)),
            None => (None, None),
        };
        json(&StreamResponse {
            index: self.count,
            token,
            top_tokens,
            generated_text,
            details: details.filter(|_| self.valid.details),
        })
    }

    fn finished(&mut self, reason: FinishReason, tail: &str, generated: usize) -> String {
        self.text.push_str(tail);
        let mut last = self.last.take().unwrap_or(TokenEvent {
            id: 0,
            text: String::new(),
            logprobs: None,
        });
        last.text.push_str(tail);
        self.count += 1;
        let full = full_text(&self.valid, self.text.clone());
        let d = details(&self.valid, reason, generated);
        self.frame(&last, Some((full, d)))
    }
}

impl SseEncoder for TgiEncoder {
    fn event(&mut self, _index: usize, event: EngineEvent) -> Vec<SseFrame> {
        let payloads: Vec<String> = match event {
            EngineEvent::Token(t) => {
                self.text.push_str(&t.text);
                let out = self.last.take().map(|prev| self.frame(&prev, None));
                self.count += usize::from(out.is_some());
                self.last = Some(t);
                out.into_iter().collect()
            }
            EngineEvent::Finished {
                reason,
                text,
                usage,
                ..
            } => vec![self.finished(reason, &text, usage.completion_tokens)],
            EngineEvent::Failed(f) => {
                let e = ApiError::from(f);
                vec![json(&TgiErrorBody {
                    error: e.to_string(),
                    error_type: "generation".into(),
                    request_id: self.request_id.clone(),
                })]
            }
        };
        payloads.into_iter().map(SseFrame::from).collect()
    }

    fn end(&mut self, _tally: &Tally) -> Vec<SseFrame> {
        Vec::new()
    }
}
