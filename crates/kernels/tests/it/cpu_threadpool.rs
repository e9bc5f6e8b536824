//! ThreadPool: every index runs exactly once per broadcast, under repetition, nesting,
//! panics and concurrent callers; reports the per-broadcast overhead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kestrel_kernels::cpu::ThreadPool;

#[test]
fn broadcast_runs_every_index_exactly_once() {
    for n in [1, 2, 3, 4, 7] {
        let pool = ThreadPool::new(n);
        assert_eq!(pool.n_threads(), n);
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        pool.broadcast(&|i, total| {
            assert_eq!(total, n);
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(
            hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
            "n = {n}"
        );
    }
}

#[test]
fn many_repeated_broadcasts() {
    let pool = ThreadPool::new(3);
    let counts: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
    let rounds = 20_000;
    for round in 0..rounds {
        pool.broadcast(&|i, _| {
            // Every thread sees the previous round completed by all threads.
            assert_eq!(counts[i].fetch_add(1, Ordering::Relaxed), round);
        });
    }
    for c in &counts {
        assert_eq!(c.load(Ordering::Relaxed), rounds);
    }
}

#[test]
fn broadcasts_after_workers_parked() {
    let pool = ThreadPool::new(3);
    let total = AtomicUsize::new(0);
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        pool.broadcast(&|i, _| {
            total.fetch_add(i + 1, Ordering::Relaxed);
        });
    }
    assert_eq!(total.load(Ordering::Relaxed), 5 * (1 + 2 + 3));
}

#[test]
fn parallel_writes_to_nested_data() {
    let pool = ThreadPool::new(4);
    let rows: Vec<Vec<AtomicUsize>> = (0..37)
        .map(|r| (0..r + 1).map(|_| AtomicUsize::new(0)).collect())
        .collect();
    pool.broadcast(&|t, n| {
        for (r, row) in rows.iter().enumerate().skip(t).step_by(n) {
            for (c, cell) in row.iter().enumerate() {
                cell.store(r * 100 + c, Ordering::Relaxed);
            }
        }
    });
    for (r, row) in rows.iter().enumerate() {
        for (c, cell) in row.iter().enumerate() {
            assert_eq!(cell.load(Ordering::Relaxed), r * 100 + c);
        }
    }
}

#[test]
fn nested_broadcast_runs_inline() {
    let pool = ThreadPool::new(3);
    let inner_calls = AtomicUsize::new(0);
    pool.broadcast(&|_, _| {
        pool.broadcast(&|i, n| {
            assert_eq!((i, n), (0, 1));
            inner_calls.fetch_add(1, Ordering::Relaxed);
        });
    });
    assert_eq!(inner_calls.load(Ordering::Relaxed), 3);
}

#[test]
fn concurrent_callers_are_serialized() {
    let pool = ThreadPool::new(2);
    let sum = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..500 {
                    pool.broadcast(&|i, _| {
                        sum.fetch_add(i + 1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    assert_eq!(sum.load(Ordering::Relaxed), 3 * 500 * 3);
}

#[test]
fn worker_panic_is_reraised_and_pool_survives() {
    let pool = ThreadPool::new(3);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.broadcast(&|i, _| assert_ne!(i, 2, "boom"));
    }));
    assert!(r.is_err());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.broadcast(&|i, _| assert_ne!(i, 0, "boom on caller"));
    }));
    assert!(r.is_err());
    let hits = AtomicUsize::new(0);
    pool.broadcast(&|_, _| {
        hits.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(hits.load(Ordering::Relaxed), 3);
}

#[test]
fn global_pool_is_shared() {
    let a = ThreadPool::global();
    assert!(std::ptr::eq(a, ThreadPool::global()));
    assert!(a.n_threads() >= 1);
}

/// Not a pass/fail check: prints the per-broadcast cost of an empty job.
#[test]
fn report_broadcast_overhead() {
    let n = std::thread::available_parallelism().map_or(2, |n| n.get());
    let pool = ThreadPool::new(n);
    let rounds = 20_000;
    let hits = AtomicUsize::new(0);
    for _ in 0..1000 {
        pool.broadcast(&|_, _| {});
    }
    let t = Instant::now();
    for _ in 0..rounds {
        pool.broadcast(&|_, _| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    assert_eq!(hits.load(Ordering::Relaxed), rounds * n);
    println!("broadcast overhead, {n} threads: {us:.2} µs per call");
}

#[test]
fn for_rows_visits_every_row_once_with_its_index() {
    for threads in 1..=3 {
        let pool = ThreadPool::new(threads);
        for (rows, min_rows) in [(0, 4), (1, 1), (3, 64), (7, 2), (100, 64)] {
            let mut data = vec![0usize; rows * 5];
            pool.for_rows(&mut data, 5, min_rows, &|first, part| {
                for (i, row) in part.chunks_exact_mut(5).enumerate() {
                    for x in row.iter_mut() {
                        *x += first + i + 1;
                    }
                }
            });
            let want: Vec<usize> = (0..rows).flat_map(|r| [r + 1; 5]).collect();
            assert_eq!(data, want, "{threads} threads, {rows} rows, min {min_rows}");
        }
    }
}

/// Spins (not sleeps) for `d`, so the time is work on a core.
fn spin_for(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[test]
fn busy_time_counts_the_jobs_of_every_thread_once() {
    for threads in [1, 3] {
        let pool = ThreadPool::new(threads);
        assert_eq!(pool.busy_time(), Duration::ZERO);
        pool.broadcast(&|_, _| spin_for(Duration::from_millis(20)));
        let after_one = pool.busy_time();
        let want = Duration::from_millis(20) * threads as u32;
        assert!(
            after_one >= want,
            "{threads} threads: {after_one:?} < {want:?}"
        );
        // A broadcast from inside a job runs inline: its time is not counted again (twice
        // would be about the outer call's wall time plus the inner spin; the other threads'
        // empty jobs take microseconds).
        let inner = Duration::from_millis(10);
        let start = Instant::now();
        pool.broadcast(&|t, _| {
            if t == 0 {
                pool.broadcast(&|_, _| spin_for(inner));
            }
        });
        let wall = start.elapsed();
        let nested = pool.busy_time() - after_one;
        assert!(nested >= inner, "{threads} threads: {nested:?}");
        assert!(
            nested < wall + inner / 2,
            "{threads} threads: counted twice, {nested:?} in {wall:?}"
        );
        // Rows too few to share stay on the caller, and count.
        let before = pool.busy_time();
        let mut data = [0u8; 4];
        pool.for_rows(&mut data, 4, 8, &|_, _| spin_for(Duration::from_millis(5)));
        assert!(pool.busy_time() - before >= Duration::from_millis(5));
    }
}
