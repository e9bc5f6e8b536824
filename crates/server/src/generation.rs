//! Running validated requests on the engine: submit every choice, and either collect the
//! results (non-streaming) or hand the streams to [`crate::sse`].

use futures_util::future::try_join_all;
use kestrel_engine::api::{EngineEvent, EngineRequest, RequestTimings, TokenEvent, Usage};
use kestrel_engine::handle::ResponseStream;
use kestrel_engine::request::FinishReason;

use crate::error::ApiError;
use crate::state::AppState;

/// What one finished choice produced.
#[derive(Debug, Clone)]
pub struct ChoiceOutput {
    /// The whole generated text.
    pub text: String,
    /// Every generated token, in order (with logprobs when requested).
    pub tokens: Vec<TokenEvent>,
    pub reason: FinishReason,
    pub usage: Usage,
    pub timings: RequestTimings,
}

/// Submits `requests`; if one is refused, the ones already admitted are dropped (aborted).
pub fn submit_all(
    state: &AppState,
    requests: impl IntoIterator<Item = EngineRequest>,
) -> Result<Vec<ResponseStream>, ApiError> {
    requests
        .into_iter()
        .map(|r| state.engine().submit(r).map_err(ApiError::from))
        .collect()
}

/// Waits for every choice; the first failure fails the request (dropping the rest aborts them).
pub async fn collect_all(
    streams: Vec<ResponseStream>,
    tally: &std::sync::Mutex<crate::request_log::Tally>,
) -> Result<Vec<ChoiceOutput>, ApiError> {
    try_join_all(streams.into_iter().map(|s| collect(s, tally))).await
}

async fn collect(
    mut stream: ResponseStream,
    tally: &std::sync::Mutex<crate::request_log::Tally>,
) -> Result<ChoiceOutput, ApiError> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    while let Some(event) = stream.next().await {
        // Never held across an await: the guard lives only for this statement.
        tally
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(&event);
        match event {
            EngineEvent::Token(t) => {
                text.push_str(&t.text);
                tokens.push(t);
            }
            EngineEvent::Finished {
                reason,
                text: tail,
                usage,
                timings,
            } => {
                text.push_str(&tail);
                return Ok(ChoiceOutput {
                    text,
                    tokens,
                    reason,
                    usage,
                    timings,
                });
            }
            EngineEvent::Failed(f) => return Err(f.into()),
        }
    }
    Err(ApiError::Internal(
        "the engine ended the request without a result".into(),
    ))
}

/// Total usage of a request's choices: the prompt counted once, completions summed.
pub fn total_usage(prompt_tokens: usize, outputs: &[ChoiceOutput]) -> Usage {
    Usage {
        prompt_tokens,
        completion_tokens: outputs.iter().map(|o| o.usage.completion_tokens).sum(),
        cached_tokens: outputs
            .iter()
            .map(|o| o.usage.cached_tokens)
            .max()
            .unwrap_or(0),
    }
}
