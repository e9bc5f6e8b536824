//! The accept loop: HTTP/1 connections served by hyper with a header read timeout, at most
//! `max_connections` open at once, and a graceful shutdown that is bounded in time.
//!
//! ```text
//! permit (max_connections) ─► accept ─► task: hyper http1 (header timeout) ─► router
//! shutdown ─► stop accepting ─► each connection finishes its response and closes
//!          ─► wait for them, at most `drain_limit`; then return regardless
//! ```

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

/// How connections are accepted and closed.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionPolicy {
    /// Most open connections; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// After the shutdown signal, how long open connections may take to finish.
    pub drain_limit: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains connections for at most
/// `policy.drain_limit`. Returns whether every connection closed in time.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    policy: ConnectionPolicy,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let permits = Arc::new(Semaphore::new(policy.max_connections.max(1)));
    let (closing, close_rx) = watch::channel(false);
    let (alive, mut all_closed) = mpsc::channel::<()>(1);
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener, &permits) => accepted,
        };
        let Some((stream, permit)) = accepted else {
            continue;
        };
        let conn = Connection {
            app: app.clone(),
            header_read_timeout: policy.header_read_timeout,
            close: close_rx.clone(),
            _alive: alive.clone(),
            _permit: permit,
        };
        tokio::spawn(conn.run(stream));
    }
    drop(listener);
    let _ = closing.send(true);
    drop(alive);
    tokio::time::timeout(policy.drain_limit, all_closed.recv())
        .await
        .is_ok()
}

/// Waits for a connection slot, then for a client. `None` on an accept error (logged; the
/// loop goes on after a short pause, e.g. when out of file descriptors).
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> Option<(TcpStream, OwnedSemaphorePermit)> {
    let permit = permits.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _)) => {
            let _ = stream.set_nodelay(true);
            Some((stream, permit))
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot accept a connection");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// One open connection; its slot and liveness token are released when it ends.
struct Connection {
    app: axum::Router,
    header_read_timeout: Duration,
    close: watch::Receiver<bool>,
    _alive: mpsc::Sender<()>,
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn run(mut self, stream: TcpStream) {
        let service = TowerToHyperService::new(self.app.clone());
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout);
        let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
        let mut closing = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                changed = self.close.changed(), if !closing => {
                    closing = true;
                    if changed.is_ok() {
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}
