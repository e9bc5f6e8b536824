//! A bounded buffer between the engine and a streaming client.
//!
//! The engine sends each request's events on an unbounded channel, and a streaming response
//! pulls them only as fast as the client reads. [`bounded`] moves the engine stream into a
//! pump task that forwards events into a channel of `capacity` events. When a client falls so
//! far behind that the channel is full (its socket and the server's write buffers are full as
//! well), the request is aborted: the engine stream is dropped, which frees its KV blocks, and
//! the client reads the buffered events followed by a failure. A client that disconnects
//! drops the receiver, which also aborts the request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::stream::{self, StreamExt};
use kestrel_engine::api::{EngineEvent, EngineFailure};
use tokio::sync::mpsc::{self, error::TrySendError};

use crate::backend::EventStream;

/// Default capacity of [`bounded`]: events a streaming client may fall behind.
pub const DEFAULT_MAX_BUFFERED_EVENTS: usize = 1024;

/// `events`, read into a buffer of `capacity` events by a task of its own.
pub fn bounded(events: EventStream, capacity: usize) -> EventStream {
    let id = events.request_id();
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let overflow = Arc::new(AtomicBool::new(false));
    tokio::spawn(pump(events, tx, overflow.clone()));
    let out = stream::unfold(
        (rx, overflow, false),
        move |(mut rx, overflow, ended)| async move {
            if ended {
                return None;
            }
            match rx.recv().await {
                Some(e) => Some((e, (rx, overflow, false))),
                None if overflow.load(Ordering::Acquire) => {
                    Some((fell_behind(capacity), (rx, overflow, true)))
                }
                None => None,
            }
        },
    );
    EventStream::new(id, out.boxed())
}

/// Forwards events until the stream ends, the receiver is gone, or the buffer is full. A
/// receiver dropped while no event comes (the request still queued, or between tokens) ends
/// the pump at once, which drops `events` and so aborts the request: it must not wait in the
/// queue, and then be computed, for a client that has left.
async fn pump(mut events: EventStream, tx: mpsc::Sender<EngineEvent>, overflow: Arc<AtomicBool>) {
    loop {
        let event = tokio::select! {
            biased;
            () = tx.closed() => return,
            event = events.next() => match event {
                Some(event) => event,
                None => return,
            },
        };
        match tx.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Closed(_)) => return,
            Err(TrySendError::Full(_)) => {
                tracing::warn!(
                    request_id = events.request_id(),
                    "the client fell behind the stream; aborting the request"
                );
                overflow.store(true, Ordering::Release);
                return;
            }
        }
    }
}

fn fell_behind(capacity: usize) -> EngineEvent {
    EngineEvent::Failed(EngineFailure::Internal(format!(
        "the client read the stream too slowly ({capacity} events waiting); the request was aborted"
    )))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Sets its flag when dropped (with the engine stream that owns it).
    struct DropFlag(Arc<AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }

    /// An engine stream that never yields (a request waiting in the queue), reporting its drop.
    fn queued_forever(dropped: Arc<AtomicBool>) -> EventStream {
        let flag = DropFlag(dropped);
        let events = stream::unfold(flag, |flag| async move {
            std::future::pending::<()>().await;
            Some((EngineEvent::Failed(EngineFailure::ShuttingDown), flag))
        });
        EventStream::new(7, events.boxed())
    }

    #[tokio::test]
    async fn a_client_gone_before_any_event_drops_the_engine_stream() {
        let dropped = Arc::new(AtomicBool::new(false));
        let client = bounded(queued_forever(dropped.clone()), 4);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !dropped.load(Ordering::Acquire),
            "kept while the client reads"
        );
        drop(client);
        let mut waited = Duration::ZERO;
        while !dropped.load(Ordering::Acquire) && waited < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(5)).await;
            waited += Duration::from_millis(5);
        }
        assert!(
            dropped.load(Ordering::Acquire),
            "the queued request was not aborted when its client went away"
        );
    }
}
