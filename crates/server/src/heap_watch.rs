//! [`HeapWatch`]: restarts a process whose heap stays fragmented.
//!
//! The heap fragmentation gauge (`kestrel:heap_fragmentation_perc`, free memory the allocator
//! keeps over the memory it holds) is read every few seconds; once it has stayed above the
//! threshold for the whole window the watch resolves, the process marks itself draining (its
//! `/health` answers 503 with the reason, so a load balancer stops sending), finishes or hands
//! back its work and exits with [`RESTART_EXIT_CODE`] for its supervisor (Kubernetes, compose
//! `restart:`) to start a fresh one. Restarting is the only cure: freed chunks pinned between
//! live ones cannot be handed back to the system.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Exit status of a process that stopped to be restarted (`EX_TEMPFAIL`).
pub const RESTART_EXIT_CODE: i32 = 75;

/// Why this process is draining, once it is.
static DRAINING: OnceLock<String> = OnceLock::new();

/// The reason this process is draining to be restarted, if it is.
pub fn draining_reason() -> Option<&'static str> {
    DRAINING.get().map(String::as_str)
}

/// Whether a value has stayed above a threshold for a whole window.
#[derive(Debug, Clone)]
pub struct SustainedAbove {
    threshold: f64,
    window: Duration,
    above_since: Option<Instant>,
}

impl SustainedAbove {
    /// Fires once the value stays above `threshold` for `window`.
    pub fn new(threshold: f64, window: Duration) -> SustainedAbove {
        SustainedAbove {
            threshold,
            window,
            above_since: None,
        }
    }

    /// Records `value` seen at `now`; true when every value since `now - window` was above
    /// the threshold. A value at or below it starts the window again.
    pub fn observe(&mut self, value: f64, now: Instant) -> bool {
        if value <= self.threshold {
            self.above_since = None;
            return false;
        }
        let since = *self.above_since.get_or_insert(now);
        now.duration_since(since) >= self.window
    }
}

/// The watch's settings.
#[derive(Debug, Clone, Copy)]
pub struct HeapWatch {
    /// Fragmentation (0..1) above which the window runs.
    pub threshold: f64,
    /// How long it must stay above.
    pub window: Duration,
    /// How often the allocator is read.
    pub interval: Duration,
}

impl HeapWatch {
    /// Resolves when the heap fragmentation has stayed above the threshold for the window,
    /// after marking the process draining; returns the last fraction read. Never resolves
    /// where the allocator reports nothing.
    pub async fn tripped(self) -> f64 {
        let mut rule = SustainedAbove::new(self.threshold, self.window);
        let mut tick = tokio::time::interval(self.interval);
        loop {
            tick.tick().await;
            let Some(heap) = kestrel_kernels::heap_stats::heap_stats() else {
                std::future::pending::<()>().await;
                unreachable!("a pending future never resolves");
            };
            let fraction = heap.fragmentation();
            if rule.observe(fraction, Instant::now()) {
                let reason = format!(
                    "restarting: heap fragmentation {:.0}% stayed above {:.0}% for {} s",
                    fraction * 100.0,
                    self.threshold * 100.0,
                    self.window.as_secs()
                );
                tracing::warn!(held = heap.held, live = heap.live, "{reason}");
                let _ = DRAINING.set(reason);
                return fraction;
            }
        }
    }
}

/// Fault injection for tests of the watch: allocates about `mib` MiB in 1 KiB chunks and frees
/// every other one, leaving half of it free but pinned between live chunks (the live half is
/// kept for the life of the process).
pub fn fragment_heap(mib: usize) {
    static KEPT: OnceLock<Vec<Box<[u8]>>> = OnceLock::new();
    let chunks: Vec<Box<[u8]>> = (0..mib * 1024)
        .map(|i| vec![i as u8; 1024].into_boxed_slice())
        .collect();
    let kept = chunks.into_iter().step_by(2).collect();
    let _ = KEPT.set(kept);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_fires_only_after_a_whole_window_above() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let mut rule = SustainedAbove::new(0.3, Duration::from_secs(300));
        assert!(!rule.observe(0.5, s(0)));
        assert!(!rule.observe(0.5, s(299)));
        // A dip starts the window again.
        assert!(!rule.observe(0.3, s(300)));
        assert!(!rule.observe(0.31, s(301)));
        assert!(!rule.observe(0.9, s(600)));
        assert!(rule.observe(0.9, s(601)));
    }

    #[test]
    fn fragmenting_the_heap_raises_the_gauge() {
        let before = kestrel_kernels::heap_stats::heap_stats().unwrap();
        fragment_heap(64);
        let after = kestrel_kernels::heap_stats::heap_stats().unwrap();
        let freed = (after.held - after.live) as i64 - (before.held - before.live) as i64;
        assert!(freed > 24 << 20, "{before:?} -> {after:?}");
    }
}
