//! [`SubmittedChoices`]: a validated request's choices running on the backend, shared by every
//! generation route of every API family:
//!
//! ```text
//! SubmittedChoices::submit ─► n EventStreams + Tally ─► merge (select_all) ─► (index, event)
//!                                                        ├─► collect ─► respond (JSON)
//!                                                        └─► into_sse ─► SseEncoder (SSE)
//! ```
//!
//! The choices' streams are merged into one stream of `(index, event)`; whoever consumes it
//! owns the streams, so dropping it (the client went away, or one choice failed) aborts every
//! choice still running.

use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use kestrel_engine::api::{EngineEvent, EngineRequest, RequestTimings, TokenEvent, Usage};
use kestrel_engine::request::FinishReason;

use crate::backend::EventStream;
use crate::error::ApiError;
use crate::request_log::{mark_logged, Tally};
use crate::request_scope::RequestScope;
use crate::sse::{sse_response, SseEncoder};
use crate::state::AppState;
use crate::validation::ValidRequest;

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

/// The events of all choices of a request, tagged with the choice index.
pub type Events = SelectAll<BoxStream<'static, (usize, EngineEvent)>>;

/// Merges the choices' streams into one; dropping it drops (aborts) the streams.
pub fn merge(streams: Vec<EventStream>) -> Events {
    stream::select_all(streams.into_iter().enumerate().map(|(index, s)| {
        stream::unfold(s, |mut s| async move { s.next().await.map(|e| (e, s)) })
            .map(move |event| (index, event))
            .boxed()
    }))
}

/// A request's submitted choices and the tally that logs it.
pub struct SubmittedChoices {
    streams: Vec<EventStream>,
    tally: Tally,
    /// How far a streaming client may fall behind ([`crate::event_buffer`]).
    max_buffered_events: usize,
}

impl SubmittedChoices {
    /// Submits one engine request per choice. If one is refused, the ones already admitted are
    /// dropped (aborted) and nothing is logged here: the error response is logged by the
    /// middleware.
    pub fn submit(
        state: &AppState,
        route: &'static str,
        prompt_tokens: usize,
        requests: impl IntoIterator<Item = EngineRequest>,
    ) -> Result<SubmittedChoices, ApiError> {
        let parent = crate::otel::RequestTrace::current().map(|t| t.traceparent());
        let streams = requests
            .into_iter()
            .map(|r| state.backend().submit(r.with_trace(parent)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut tally =
            Tally::new(route, prompt_tokens, streams.len()).for_model(&state.model().model_id);
        tally.set_engine_ids(streams.iter().map(EventStream::request_id).collect());
        Ok(SubmittedChoices {
            streams,
            tally,
            max_buffered_events: state.limits().max_buffered_events,
        })
    }

    /// Submits every engine request of `valid` (each under the request's `scope`: its key
    /// salt) and waits until the backend admitted them ([`Self::submit`], then
    /// [`Self::admitted`]): what every route with a validated request does.
    pub async fn submit_valid(
        state: &AppState,
        route: &'static str,
        valid: &ValidRequest,
        scope: &RequestScope,
    ) -> Result<SubmittedChoices, ApiError> {
        let requests = valid.engine_requests().into_iter().map(|r| scope.apply(r));
        Self::submit(state, route, valid.prompt_tokens(), requests)?
            .admitted()
            .await
    }

    /// Waits until the backend queued every choice; if it refused one (a first-token
    /// objective it cannot meet, say), the others are dropped (aborted) and the refusal is the
    /// request's error, logged by the middleware with the error response. Returns at once for
    /// requests without an objective, which are queued unconditionally.
    pub async fn admitted(mut self) -> Result<SubmittedChoices, ApiError> {
        for stream in &mut self.streams {
            if let Err(failure) = stream.admitted().await {
                let SubmittedChoices { streams, tally, .. } = self;
                drop(streams);
                tally.discard();
                return Err(failure.into());
            }
        }
        Ok(self)
    }

    /// The backend's id of the first choice (0 if there is none).
    pub fn first_id(&self) -> u64 {
        self.streams.first().map_or(0, EventStream::request_id)
    }

    /// A `text/event-stream` response of every choice's events through `encoder`.
    pub fn into_sse(self, encoder: impl SseEncoder) -> Response {
        let cap = self.max_buffered_events;
        let streams = self
            .streams
            .into_iter()
            .map(|s| crate::event_buffer::bounded(s, cap))
            .collect();
        sse_response(merge(streams), self.tally, encoder)
    }

    /// Waits for every choice; the first failure fails the request (dropping the rest aborts
    /// them). The tally comes back to log the request with its final status.
    pub async fn collect(self) -> (Tally, Result<Vec<ChoiceOutput>, ApiError>) {
        let SubmittedChoices {
            streams, mut tally, ..
        } = self;
        let mut choices: Vec<Choice> = streams.iter().map(|_| Choice::default()).collect();
        let mut events = merge(streams);
        while let Some((index, event)) = events.next().await {
            tally.observe(&event);
            let Some(choice) = choices.get_mut(index) else {
                continue;
            };
            if let Err(e) = choice.push(event) {
                return (tally, Err(e));
            }
        }
        let outputs = choices
            .into_iter()
            .map(|c| c.done)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::Internal("the engine ended the request without a result".into())
            });
        (tally, outputs)
    }
}

/// One choice being collected.
#[derive(Default)]
struct Choice {
    text: String,
    tokens: Vec<TokenEvent>,
    done: Option<ChoiceOutput>,
}

impl Choice {
    fn push(&mut self, event: EngineEvent) -> Result<(), ApiError> {
        match event {
            EngineEvent::Token(t) => {
                self.text.push_str(&t.text);
                self.tokens.push(t);
            }
            EngineEvent::Finished {
                reason,
                text: tail,
                usage,
                timings,
            } => {
                let mut text = std::mem::take(&mut self.text);
                text.push_str(&tail);
                self.done = Some(ChoiceOutput {
                    text,
                    tokens: std::mem::take(&mut self.tokens),
                    reason,
                    usage,
                    timings,
                });
            }
            EngineEvent::Failed(f) => return Err(f.into()),
        }
        Ok(())
    }
}

/// The response of a collected request: `result`'s body, or its error in the route's shape
/// `E`. The tally records the status and logs the request; the response is marked as logged.
pub fn respond<E>(mut tally: Tally, result: Result<Response, ApiError>) -> Response
where
    E: From<ApiError> + IntoResponse,
{
    let response = result.unwrap_or_else(|e| E::from(e).into_response());
    tally.set_status(response.status().as_u16());
    mark_logged(response)
}
