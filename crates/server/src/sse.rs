//! Server-sent events over a request's merged choice streams.
//!
//! ```text
//! ResponseStream 0 ─┐
//! ResponseStream 1 ─┼─► select_all (index, event) ─► Tally::observe ─► SseEncoder ─► "data: {...}\n\n"
//! ...               ┘                                          end(&Tally) ─► trailing frames
//! ```
//!
//! The body owns the merged stream: when the client disconnects, the body is dropped, and with
//! it every `ResponseStream`, which aborts the requests still running. The tally is dropped
//! with it and logs the request.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use kestrel_engine::api::EngineEvent;

use crate::request_log::{mark_logged, Tally};
use crate::submitted_choices::Events;

/// Turns the events of all choices into SSE `data` payloads.
pub trait SseEncoder: Send + 'static {
    /// Payloads for one event of choice `index` (possibly none).
    fn event(&mut self, index: usize, event: EngineEvent) -> Vec<String>;
    /// Payloads after every choice ended (usage chunk, `[DONE]`); `tally` has seen every event.
    fn end(&mut self, tally: &Tally) -> Vec<String>;
}

/// What the body stream carries between polls.
struct Streaming<E> {
    events: Events,
    tally: Tally,
    encoder: E,
}

/// A `text/event-stream` response streaming `events` through `encoder`; `tally` sees every
/// event first and logs the request when the body ends or is dropped.
pub fn sse_response(events: Events, tally: Tally, encoder: impl SseEncoder) -> Response {
    let start = Streaming {
        events,
        tally,
        encoder,
    };
    let body = futures_util::stream::unfold(Some(start), |state| async move {
        let mut s = state?;
        match s.events.next().await {
            Some((index, event)) => {
                s.tally.observe(&event);
                let frames = frames(s.encoder.event(index, event));
                Some((Ok::<_, Infallible>(frames), Some(s)))
            }
            None => Some((Ok(frames(s.encoder.end(&s.tally))), None)),
        }
    });
    let response = (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response();
    mark_logged(response)
}

fn frames(payloads: Vec<String>) -> Bytes {
    let mut out = String::new();
    for p in payloads {
        out.push_str("data: ");
        out.push_str(&p);
        out.push_str("\n\n");
    }
    Bytes::from(out)
}

/// `value` as JSON text; serializing the server's own wire types cannot fail, but if it did the
/// client gets an error payload rather than a broken stream.
pub fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| {
        format!(r#"{{"error":{{"message":"cannot serialize a chunk: {e}","type":"internal_error","param":null,"code":null}}}}"#)
    })
}
