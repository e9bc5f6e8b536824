//! The flags that make `serve` and `worker` restart themselves when their heap stays
//! fragmented (see `kestrel_server::heap_watch`).

use std::time::Duration;

use anyhow::{bail, Result};
use kestrel_server::heap_watch::HeapWatch;

/// How often the watch reads the allocator.
const WATCH_INTERVAL: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug, Clone)]
pub struct RestartArgs {
    /// Drain and exit (status 75, for the supervisor to start a fresh process) once the heap
    /// fragmentation (free memory the allocator keeps over what it holds, 0..1) stays above
    /// this fraction for --fragmentation-window seconds. Off when not given.
    #[arg(long, value_name = "FRACTION")]
    pub restart_on_fragmentation: Option<f64>,
    /// Seconds the fragmentation must stay above --restart-on-fragmentation.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub fragmentation_window: u64,
    /// Fault injection for tests: fragment about this many MiB of heap at start.
    #[arg(long, hide = true, value_name = "MIB")]
    pub fault_fragment_heap: Option<usize>,
}

impl RestartArgs {
    /// The watch these flags ask for, after checking them; runs the fault injection first.
    pub fn watch(&self) -> Result<Option<HeapWatch>> {
        if let Some(mib) = self.fault_fragment_heap {
            kestrel_server::heap_watch::fragment_heap(mib);
        }
        let Some(threshold) = self.restart_on_fragmentation else {
            return Ok(None);
        };
        if !(threshold > 0.0 && threshold < 1.0) {
            bail!("--restart-on-fragmentation must be a fraction between 0 and 1, got {threshold}");
        }
        if self.fragmentation_window == 0 {
            bail!("--fragmentation-window must be at least 1 second");
        }
        let window = Duration::from_secs(self.fragmentation_window);
        Ok(Some(HeapWatch {
            threshold,
            window,
            interval: WATCH_INTERVAL.min(window),
        }))
    }
}

/// Resolves when `watch` trips (returns true), or never when there is none.
pub async fn tripped(watch: Option<HeapWatch>) -> bool {
    match watch {
        Some(w) => {
            w.tripped().await;
            true
        }
        None => std::future::pending().await,
    }
}

/// Whether the process stopped to be restarted, shared between its stop signal and its exit.
#[derive(Clone, Default)]
pub struct RestartFlag(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl RestartFlag {
    /// Resolves on `signal`, or when `watch` trips and then `notice` has passed (while
    /// `/health` already answers 503, so a load balancer stops sending first).
    pub async fn stop_on(
        self,
        signal: impl std::future::Future<Output = ()>,
        watch: Option<HeapWatch>,
        notice: Duration,
    ) {
        tokio::select! {
            _ = signal => {}
            _ = tripped(watch) => {
                self.0.store(true, std::sync::atomic::Ordering::Release);
                tokio::time::sleep(notice).await;
            }
        }
    }

    /// Exits with the restart status when the watch stopped the process.
    pub fn exit_if_tripped(&self) {
        if self.0.load(std::sync::atomic::Ordering::Acquire) {
            eprintln!("drained for a restart (heap fragmentation): exiting");
            std::process::exit(kestrel_server::heap_watch::RESTART_EXIT_CODE);
        }
    }
}
