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

/// One server-sent event: its `data` payload, named by an `event:` line where the API names
/// its events (Anthropic's Messages, OpenAI's Responses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    pub event: Option<&'static str>,
    pub data: String,
}

impl SseFrame {
    /// A frame named `event`.
    pub fn named(event: &'static str, data: String) -> SseFrame {
        SseFrame {
            event: Some(event),
            data,
        }
    }
}

impl From<String> for SseFrame {
    /// An unnamed frame (OpenAI's chat and completions chunks, TGI's tokens).
    fn from(data: String) -> SseFrame {
        SseFrame { event: None, data }
    }
}

/// Turns the events of all choices into server-sent events.
pub trait SseEncoder: Send + 'static {
    /// Frames at the start, before any event (e.g. `message_start`).
    fn start(&mut self) -> Vec<SseFrame> {
        Vec::new()
    }
    /// Frames for one event of choice `index` (possibly none).
    fn event(&mut self, index: usize, event: EngineEvent) -> Vec<SseFrame>;
    /// Frames after every choice ended (usage chunk, `[DONE]`); `tally` has seen every event.
    fn end(&mut self, tally: &Tally) -> Vec<SseFrame>;
    /// A frame that keeps an idle stream open while the request waits or prefills (Anthropic's
    /// `ping`); `None`: the stream stays silent.
    fn keepalive(&mut self) -> Option<SseFrame> {
        None
    }
}

/// How long a stream may stay silent before the encoder's keepalive frame goes out.
pub const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// What the body stream carries between polls.
struct Streaming<E> {
    events: Events,
    tally: Tally,
    encoder: E,
}

/// A `text/event-stream` response streaming `events` through `encoder`; `tally` sees every
/// event first and logs the request when the body ends or is dropped.
pub fn sse_response(events: Events, tally: Tally, encoder: impl SseEncoder) -> Response {
    let mut encoder = encoder;
    let opening = frames(encoder.start());
    let start = Streaming {
        events,
        tally,
        encoder,
    };
    let body = futures_util::stream::unfold(Some(start), |state| async move {
        let mut s = state?;
        let next = match s.encoder.keepalive() {
            None => s.events.next().await,
            Some(ping) => match tokio::time::timeout(KEEPALIVE_INTERVAL, s.events.next()).await {
                Ok(next) => next,
                Err(_) => return Some((Ok::<_, Infallible>(frames(vec![ping])), Some(s))),
            },
        };
        match next {
            Some((index, event)) => {
                s.tally.observe(&event);
                let frames = frames(s.encoder.event(index, event));
                Some((Ok(frames), Some(s)))
            }
            None => Some((Ok(frames(s.encoder.end(&s.tally))), None)),
        }
    });
    let body = futures_util::stream::iter([Ok::<_, Infallible>(opening)])
        .chain(body)
        .filter(|frames| std::future::ready(!matches!(frames, Ok(b) if b.is_empty())));
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

fn frames(frames: Vec<SseFrame>) -> Bytes {
    let mut out = String::new();
    for f in frames {
        if let Some(event) = f.event {
            out.push_str("event: ");
            out.push_str(event);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&f.data);
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
