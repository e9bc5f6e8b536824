//! Server-sent events over engine streams.
//!
//! ```text
//! ResponseStream 0 ─► forwarder task ─┐
//! ResponseStream 1 ─► forwarder task ─┼─► mpsc (index, event) ─► SseEncoder ─► "data: {...}\n\n"
//! ...                                 ┘                              end() ─► trailing frames
//! ```
//!
//! When the client disconnects, the body (and the receiver) is dropped; each forwarder sees its
//! channel close, stops waiting and drops its `ResponseStream`, which aborts the request.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use kestrel_engine::api::EngineEvent;
use kestrel_engine::handle::ResponseStream;
use tokio::sync::mpsc;

use crate::request_log::LoggedByHandler;

/// Turns the events of all choices into SSE `data` payloads.
pub trait SseEncoder: Send + 'static {
    /// Payloads for one event of choice `index` (possibly none).
    fn event(&mut self, index: usize, event: EngineEvent) -> Vec<String>;
    /// Payloads after every choice ended (usage chunk, `[DONE]`).
    fn end(&mut self) -> Vec<String>;
}

/// A `text/event-stream` response streaming `streams` through `encoder`.
pub fn sse_response(streams: Vec<ResponseStream>, encoder: impl SseEncoder) -> Response {
    let (tx, rx) = mpsc::channel::<(usize, EngineEvent)>(64);
    for (index, stream) in streams.into_iter().enumerate() {
        tokio::spawn(forward(index, stream, tx.clone()));
    }
    drop(tx);
    let body = futures_util::stream::unfold(Some((rx, encoder)), |state| async move {
        let (mut rx, mut encoder) = state?;
        match rx.recv().await {
            Some((index, event)) => {
                let frames = frames(encoder.event(index, event));
                Some((Ok::<_, Infallible>(frames), Some((rx, encoder))))
            }
            None => Some((Ok(frames(encoder.end())), None)),
        }
    });
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response();
    response.extensions_mut().insert(LoggedByHandler);
    response
}

async fn forward(index: usize, mut stream: ResponseStream, tx: mpsc::Sender<(usize, EngineEvent)>) {
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            () = tx.closed() => return,
        };
        let Some(event) = event else { return };
        if tx.send((index, event)).await.is_err() {
            return;
        }
    }
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
