//! [`WorkRanges`]: the units of one pool call shared out as contiguous ranges, one per thread,
//! where a thread that runs out of its own takes the back half of the largest range left.
//!
//! A decode step's products stream their weights from memory. A static split (thread `t` runs
//! units `U·t/n..U·(t+1)/n`) gives each thread one sequential stream, but the two threads
//! never finish together: memory serves them unevenly, and whichever ends first spins until
//! the other is done, at every product. Handing out single units from one shared counter
//! balances the ends but interleaves the threads' reads and makes every unit a contended
//! atomic. Here each thread still reads a contiguous run, claiming its units one at a time
//! from the front of its own range (an uncontended compare-and-swap on its own cache line),
//! and only the end of a call moves work between threads:
//!
//! ```text
//!   thread 0: [f0 ······ b0)      thread 1: [f1 ··· b1)   (each takes from its front)
//!   thread 1 runs out:  thread 0's range becomes [f0, m), thread 1's [m, b0), m = the middle
//! ```
//!
//! A range is one `u64` (front in the low half, back in the high half), so a steal and the
//! owner's next claim cannot both take a unit: whichever compare-and-swap lands first wins.

use std::sync::atomic::{AtomicU64, Ordering};

/// One thread's range, on its own cache lines (128 bytes covers adjacent-line prefetch).
#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

/// Per-thread ranges of a call's units (see the module docs). Reused across calls: [`reset`]
/// shares out a new call's units before its broadcast.
///
/// [`reset`]: WorkRanges::reset
#[derive(Default)]
pub struct WorkRanges {
    slots: Vec<Slot>,
}

/// A range `front..back` as one word.
fn pack(front: u32, back: u32) -> u64 {
    u64::from(front) | u64::from(back) << 32
}

/// The `(front, back)` of a packed range.
fn unpack(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

impl WorkRanges {
    /// Shares units `0..total` out over `n` threads (at least 1), thread `t` starting with
    /// `total·t/n..total·(t+1)/n`. Panics if `total` does not fit 32 bits.
    pub fn reset(&mut self, total: usize, n: usize) {
        let n = n.max(1);
        let total = u32::try_from(total).expect("WorkRanges: more than 2^32 units");
        if self.slots.len() < n {
            self.slots.resize_with(n, Slot::default);
        }
        let share = |t: usize| (u64::from(total) * t as u64 / n as u64) as u32;
        for (t, slot) in self.slots.iter_mut().enumerate() {
            let range = if t < n {
                pack(share(t), share(t + 1))
            } else {
                0
            };
            *slot.0.get_mut() = range;
        }
    }

    /// Runs `f(unit)` as thread `t` of the call: the units of its own range in order, then,
    /// while any thread has units left, the back half of the largest range (in order too).
    /// Every unit of the call runs exactly once over all its threads.
    pub fn run(&self, t: usize, mut f: impl FnMut(usize)) {
        loop {
            while let Some(unit) = self.claim_front(t) {
                f(unit as usize);
            }
            if !self.steal_into(t) {
                return;
            }
        }
    }

    /// The next unit of thread `t`'s own range, if any is left.
    fn claim_front(&self, t: usize) -> Option<u32> {
        let slot = &self.slots[t].0;
        let mut word = slot.load(Ordering::Acquire);
        loop {
            let (front, back) = unpack(word);
            if front >= back {
                return None;
            }
            match slot.compare_exchange_weak(
                word,
                pack(front + 1, back),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(front),
                Err(now) => word = now,
            }
        }
    }

    /// Moves the back half (rounded up) of the largest other range into thread `t`'s own,
    /// which is empty; false when no thread has units left.
    fn steal_into(&self, t: usize) -> bool {
        loop {
            let Some((victim, word)) = self.largest_other(t) else {
                return false;
            };
            let (front, back) = unpack(word);
            let mid = back - (back - front).div_ceil(2);
            let shrunk = pack(front, mid);
            let taken = self.slots[victim].0.compare_exchange(
                word,
                shrunk,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if taken.is_ok() {
                // Thread t's range is empty, and no thread writes an empty range but its
                // owner, so a plain store cannot lose another thread's update.
                self.slots[t].0.store(pack(mid, back), Ordering::Release);
                return true;
            }
        }
    }

    /// The thread other than `t` with the most units left, and its range; `None` if none has
    /// any.
    fn largest_other(&self, t: usize) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64, u32)> = None;
        for (v, slot) in self.slots.iter().enumerate() {
            if v == t {
                continue;
            }
            let word = slot.0.load(Ordering::Acquire);
            let (front, back) = unpack(word);
            let left = back.saturating_sub(front);
            if left > 0 && best.is_none_or(|(_, _, most)| left > most) {
                best = Some((v, word, left));
            }
        }
        best.map(|(v, word, _)| (v, word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ThreadPool;
    use std::sync::atomic::AtomicUsize;

    /// Runs `total` units over a pool of `threads`, unit `u` sleeping `delay(u, t)` µs on
    /// thread `t`; returns how often each unit ran and how many units each thread ran.
    fn run_all(
        total: usize,
        threads: usize,
        delay: impl Fn(usize, usize) -> u64 + Sync,
    ) -> (Vec<usize>, Vec<usize>) {
        let pool = ThreadPool::new(threads);
        let mut ranges = WorkRanges::default();
        ranges.reset(total, pool.n_threads());
        let runs: Vec<AtomicUsize> = (0..total).map(|_| AtomicUsize::new(0)).collect();
        let per_thread: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
        pool.broadcast(&|t, _| {
            ranges.run(t, |u| {
                runs[u].fetch_add(1, Ordering::Relaxed);
                per_thread[t].fetch_add(1, Ordering::Relaxed);
                let us = delay(u, t);
                if us > 0 {
                    std::thread::sleep(std::time::Duration::from_micros(us));
                }
            })
        });
        let take = |v: Vec<AtomicUsize>| v.into_iter().map(|a| a.into_inner()).collect();
        (take(runs), take(per_thread))
    }

    #[test]
    fn every_unit_runs_once() {
        for threads in [1, 2, 3, 5] {
            for total in [0, 1, 2, 7, 64, 1000] {
                let (runs, per_thread) = run_all(total, threads, |_, _| 0);
                assert!(
                    runs.iter().all(|&r| r == 1),
                    "{threads} threads, {total} units"
                );
                assert_eq!(per_thread.iter().sum::<usize>(), total);
            }
        }
    }

    #[test]
    fn a_slow_thread_gives_its_units_away() {
        // Thread 0 takes 5 ms a unit, thread 1 none: with a static split thread 0 would run
        // its 20 units; the steals leave it only a few.
        let (runs, per_thread) = run_all(40, 2, |_, t| if t == 0 { 5000 } else { 0 });
        assert!(runs.iter().all(|&r| r == 1));
        assert!(per_thread[0] < 10, "thread 0 ran {} units", per_thread[0]);
    }

    #[test]
    fn a_thread_runs_its_units_in_order_until_it_steals() {
        let mut ranges = WorkRanges::default();
        ranges.reset(10, 2);
        let mut seen = Vec::new();
        ranges.run(0, |u| seen.push(u));
        // Thread 0 (alone) runs 0..5, then steals the back half of 5..10 rounded up (7..10),
        // then of what is left (6, then 5).
        assert_eq!(seen, [0, 1, 2, 3, 4, 7, 8, 9, 6, 5]);
    }

    /// Each thread's `(front, back)`.
    fn shares(ranges: &WorkRanges) -> Vec<(u32, u32)> {
        let load = |s: &Slot| unpack(s.0.load(Ordering::Relaxed));
        ranges.slots.iter().map(load).collect()
    }

    #[test]
    fn reset_shares_units_evenly() {
        let mut ranges = WorkRanges::default();
        ranges.reset(10, 3);
        assert_eq!(shares(&ranges), [(0, 3), (3, 6), (6, 10)]);
        // A smaller reset leaves no stale range behind.
        ranges.reset(4, 2);
        assert_eq!(shares(&ranges), [(0, 2), (2, 4), (0, 0)]);
    }
}
