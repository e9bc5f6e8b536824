//! `kestrel membw`: the machine's memory bandwidth, measured with STREAM's triad
//! `a[i] = b[i] + s * c[i]` over three `f64` arrays far larger than the caches, on Kestrel's own
//! thread pool. Decode of a large model is bound by how fast the weights stream from memory, so
//! `kestrel speed --membw` puts its achieved bytes/s beside this number.
//!
//! ```text
//!   a, b, c: `elems` f64 each, split in n contiguous chunks, chunk k on pool thread k
//!   bytes per pass (STREAM's count) = 3 * elems * 8   (read b, read c, write a)
//!   GB/s = bytes / best pass time / 1e9
//! ```
//!
//! STREAM counts no write-allocate traffic (the read of `a`'s lines before they are written),
//! so a read-only stream can exceed the triad figure; the `read` column (a sum over `b` and
//! `c`) shows that bound.

use std::sync::Mutex;
use std::time::Instant;

use anyhow::{ensure, Result};
use kestrel_kernels::cpu::threadpool::ThreadPool;

/// Default size of each of the three arrays.
pub const DEFAULT_MIB: usize = 256;

/// Default timed passes (after one warm-up pass); the best is reported, as STREAM does.
pub const DEFAULT_REPS: usize = 10;

const TRIAD_SCALAR: f64 = 3.0;

#[derive(clap::Args)]
pub struct MembwArgs {
    /// Size of each of the three arrays, in MiB (pick several times the last-level cache).
    #[arg(long, default_value_t = DEFAULT_MIB)]
    pub mib: usize,
    /// Timed passes per thread count (the best one is reported).
    #[arg(short = 'r', long, default_value_t = DEFAULT_REPS)]
    pub reps: usize,
    /// Thread counts to measure, comma-separated.
    #[arg(short = 't', long, value_delimiter = ',', default_values_t = [1usize, 2])]
    pub threads: Vec<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Best-of-N bandwidths at one thread count, in GB/s (10^9 bytes per second).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Bandwidth {
    pub threads: usize,
    /// STREAM triad, counted as 3 arrays per pass.
    pub triad_gbs: f64,
    /// Read-only pass over two arrays (2 arrays per pass).
    pub read_gbs: f64,
}

pub fn run(args: MembwArgs) -> Result<()> {
    ensure!(args.mib > 0, "--mib must be positive");
    let mut results = Vec::new();
    for &n in &args.threads {
        let pool = crate::thread_pool(Some(n));
        results.push(measure(pool, args.mib, args.reps)?);
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"array_mib": args.mib, "reps": args.reps, "results": results})
        );
    } else {
        println!("| threads | triad GB/s | read GB/s |");
        println!("| ---: | ---: | ---: |");
        for r in &results {
            println!("| {} | {:.1} | {:.1} |", r.threads, r.triad_gbs, r.read_gbs);
        }
    }
    Ok(())
}

/// Triad and read bandwidth on `pool`'s threads with three arrays of `mib` MiB each.
pub fn measure(pool: &ThreadPool, mib: usize, reps: usize) -> Result<Bandwidth> {
    let elems = mib * (1 << 20) / std::mem::size_of::<f64>();
    ensure!(elems > 0, "array size too small");
    // Non-zero fills write every page, so no pass reads the shared zero page.
    let b = vec![1.0f64; elems];
    let c = vec![2.0f64; elems];
    let mut a = vec![0.5f64; elems];
    let chunk = elems.div_ceil(pool.n_threads());
    let triad_secs = best_of(reps, || triad(pool, &mut a, &b, &c, chunk));
    let expected = 1.0 + TRIAD_SCALAR * 2.0;
    ensure!(
        a.iter().step_by(4099).all(|&v| v == expected),
        "triad produced wrong values"
    );
    let mut checksum = 0u64;
    let read_secs = best_of(reps, || checksum = read(pool, &b, &c, chunk));
    let want = (elems as u64).wrapping_mul(1.0f64.to_bits().wrapping_add(2.0f64.to_bits()));
    ensure!(checksum == want, "read pass produced a wrong checksum");
    let bytes = elems as f64 * std::mem::size_of::<f64>() as f64;
    Ok(Bandwidth {
        threads: pool.n_threads(),
        triad_gbs: 3.0 * bytes / triad_secs / 1e9,
        read_gbs: 2.0 * bytes / read_secs / 1e9,
    })
}

/// Seconds of the fastest of `reps` timed runs of `f`, after one warm-up run.
fn best_of(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// One triad pass: chunk `k` (of `chunk` elements) on thread `k mod n`.
fn triad(pool: &ThreadPool, a: &mut [f64], b: &[f64], c: &[f64], chunk: usize) {
    let parts: Vec<Mutex<&mut [f64]>> = a.chunks_mut(chunk).map(Mutex::new).collect();
    let s = std::hint::black_box(TRIAD_SCALAR);
    pool.broadcast(&|t, n| {
        for k in (t..parts.len()).step_by(n) {
            // Each chunk is locked by exactly one thread, once: never contended or poisoned
            // by another holder, so a poisoned guard is still the right slice.
            let mut dst = parts[k].lock().unwrap_or_else(|e| e.into_inner());
            let range = k * chunk..k * chunk + dst.len();
            for ((x, &y), &z) in dst.iter_mut().zip(&b[range.clone()]).zip(&c[range]) {
                *x = y + s * z;
            }
        }
    });
}

/// One read pass over `b` and `c`: a wrapping sum of their bit patterns (an integer sum, so
/// the compiler vectorizes it), returned so the loads cannot be optimized away.
fn read(pool: &ThreadPool, b: &[f64], c: &[f64], chunk: usize) -> u64 {
    let n_chunks = b.len().div_ceil(chunk);
    let sums: Vec<Mutex<u64>> = (0..n_chunks).map(|_| Mutex::new(0)).collect();
    pool.broadcast(&|t, n| {
        for k in (t..n_chunks).step_by(n) {
            let range = k * chunk..((k + 1) * chunk).min(b.len());
            let sum = |v: &[f64]| v.iter().fold(0u64, |acc, x| acc.wrapping_add(x.to_bits()));
            let total = sum(&b[range.clone()]).wrapping_add(sum(&c[range]));
            *sums[k].lock().unwrap_or_else(|e| e.into_inner()) = total;
        }
    });
    sums.iter()
        .map(|m| *m.lock().unwrap_or_else(|e| e.into_inner()))
        .fold(0u64, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_arrays_give_positive_finite_bandwidth() {
        let pool = ThreadPool::new(2);
        let bw = measure(&pool, 1, 2).expect("measure");
        assert_eq!(bw.threads, 2);
        assert!(bw.triad_gbs.is_finite() && bw.triad_gbs > 0.0, "{bw:?}");
        assert!(bw.read_gbs.is_finite() && bw.read_gbs > 0.0, "{bw:?}");
    }

    #[test]
    fn triad_covers_every_element_with_uneven_chunks() {
        let pool = ThreadPool::new(2);
        let (b, c) = (vec![1.0; 1001], vec![2.0; 1001]);
        let mut a = vec![0.0; 1001];
        triad(&pool, &mut a, &b, &c, 1001usize.div_ceil(3));
        assert!(a.iter().all(|&v| v == 7.0));
        let sum = read(&pool, &b, &c, 334);
        assert_eq!(
            sum,
            1001u64.wrapping_mul(1.0f64.to_bits().wrapping_add(2.0f64.to_bits()))
        );
    }
}
