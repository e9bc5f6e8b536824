//! Ends `kestrel serve` when its engine dies: a panicking step fails the requests in flight and
//! stops the engine thread; the server then shuts down and the process exits non-zero, so an
//! orchestrator replaces it instead of routing traffic to a server that can only fail.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kestrel_engine::handle::EngineHandle;

/// How often the engine thread's liveness is checked.
const POLL: Duration = Duration::from_millis(250);

/// Whether the engine died (set by the future of [`EngineWatch::stop_signal`]).
#[derive(Clone, Default)]
pub struct EngineWatch {
    died: Arc<AtomicBool>,
}

impl EngineWatch {
    /// Resolves when `signal` does (the shutdown signal) or when `engine` stops running
    /// (recorded as a death).
    pub async fn stop_signal(
        self,
        engine: EngineHandle,
        signal: impl std::future::Future<Output = ()>,
    ) {
        tokio::select! {
            _ = signal => {}
            _ = death(&engine) => {
                tracing::error!("the engine stopped unexpectedly; shutting the server down");
                self.died.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Whether the server stopped because the engine died.
    pub fn engine_died(&self) -> bool {
        self.died.load(Ordering::SeqCst)
    }
}

async fn death(engine: &EngineHandle) {
    while engine.is_alive() {
        tokio::time::sleep(POLL).await;
    }
}
