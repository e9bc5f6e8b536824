//! The SSE encoder of both OpenAI routes: each event of a choice becomes that route's chunks
//! ([`OpenAiApi::token`], [`OpenAiApi::finished`]); a failure becomes an OpenAI error payload;
//! the stream ends with an optional usage chunk (`stream_options.include_usage`, when every
//! choice finished) and `data: [DONE]`.

use kestrel_engine::api::EngineEvent;

use crate::error::ApiError;
use crate::openai::api::{OpenAiApi, OpenAiContext};
use crate::request_log::Tally;
use crate::sse::{json, SseEncoder, SseFrame};

/// Encodes the streams of route `A`.
pub struct OpenAiEncoder<A: OpenAiApi> {
    cx: OpenAiContext,
    choices: Vec<A::ChoiceState>,
    /// The request's id, for error events.
    request_id: Option<String>,
}

impl<A: OpenAiApi> OpenAiEncoder<A> {
    /// An encoder for `n` choices.
    pub fn new(cx: OpenAiContext, n: usize) -> Self {
        OpenAiEncoder {
            cx,
            choices: (0..n).map(|_| A::ChoiceState::default()).collect(),
            request_id: crate::request_id::current_string(),
        }
    }
}

impl<A: OpenAiApi> SseEncoder for OpenAiEncoder<A> {
    fn event(&mut self, index: usize, event: EngineEvent) -> Vec<SseFrame> {
        let mut out = Vec::new();
        let Some(choice) = self.choices.get_mut(index) else {
            return Vec::new();
        };
        match event {
            EngineEvent::Token(t) => A::token(&self.cx, choice, index, t, &mut out),
            EngineEvent::Finished { reason, text, .. } => {
                A::finished(&self.cx, choice, index, reason, text, &mut out);
            }
            EngineEvent::Failed(f) => {
                let body = ApiError::from(f).openai_body_for(self.request_id.clone());
                out.push(json(&body));
            }
        }
        out.into_iter().map(SseFrame::from).collect()
    }

    fn end(&mut self, tally: &Tally) -> Vec<SseFrame> {
        let mut out = Vec::new();
        if self.cx.include_usage && tally.done() {
            let reasoning = self.choices.iter().map(A::reasoning_tokens).sum();
            out.push(A::usage_chunk(&self.cx, tally.usage(), reasoning));
        }
        out.push("[DONE]".to_string());
        out.into_iter().map(SseFrame::from).collect()
    }
}
