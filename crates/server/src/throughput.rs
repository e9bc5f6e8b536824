//! Recent request throughput, for `Retry-After`: the times of the last completed generation
//! requests, and [`retry_after_secs`], which turns the queue length into a wait in seconds.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Completions remembered for the rate.
const WINDOW: usize = 32;
/// Completions older than this do not count.
const MAX_AGE: Duration = Duration::from_secs(60);
/// Largest `Retry-After`, in seconds.
pub const MAX_RETRY_AFTER_SECS: u64 = 60;

fn completions() -> &'static Mutex<VecDeque<Instant>> {
    static C: OnceLock<Mutex<VecDeque<Instant>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(VecDeque::with_capacity(WINDOW)))
}

/// Records that a generation request finished now.
pub fn record_completion() {
    let mut c = completions().lock().unwrap_or_else(|p| p.into_inner());
    if c.len() == WINDOW {
        c.pop_front();
    }
    c.push_back(Instant::now());
}

/// Completed requests per second over the recent window, if at least two are recent.
fn completion_rate(now: Instant) -> Option<f64> {
    let c = completions().lock().unwrap_or_else(|p| p.into_inner());
    let recent: Vec<Instant> = c
        .iter()
        .copied()
        .filter(|t| now.duration_since(*t) <= MAX_AGE)
        .collect();
    let first = *recent.first()?;
    let span = now.duration_since(first).as_secs_f64();
    (recent.len() >= 2 && span > 0.0).then(|| recent.len() as f64 / span)
}

/// Seconds a refused client should wait before retrying, with `waiting` requests queued.
pub fn retry_after_secs(waiting: usize) -> u64 {
    estimate(waiting, completion_rate(Instant::now()))
}

/// `(waiting + 1) / rate`, rounded up and clamped to `1..=MAX_RETRY_AFTER_SECS`; without a
/// recent rate, one second per queued request.
fn estimate(waiting: usize, rate: Option<f64>) -> u64 {
    let ahead = waiting as f64 + 1.0;
    let secs = match rate {
        Some(r) if r > 0.0 => (ahead / r).ceil(),
        _ => ahead,
    };
    (secs as u64).clamp(1, MAX_RETRY_AFTER_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_is_bounded_and_grows_with_the_queue() {
        assert_eq!(estimate(0, Some(100.0)), 1);
        assert_eq!(estimate(9, Some(2.0)), 5);
        assert_eq!(estimate(10_000, Some(1.0)), MAX_RETRY_AFTER_SECS);
        assert_eq!(estimate(3, None), 4);
        assert_eq!(estimate(0, Some(0.0)), 1);
    }
}
