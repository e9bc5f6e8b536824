//! The blocking of [`super::bf16_tiles`]'s AVX512-BF16 kernel (`vdpbf16ps`, the register
//! tile of `packed::x86::avx512_bf16`): the activations split into bf16 hi and lo parts once,
//! the weights read in place.
//!
//! ```text
//!   x (m × K f32) ──split──▶ per row: per 32-element step 64 bytes of hi, 64 of lo parts
//!   threads claim units of weight rows (≈ UNIT_BYTES, whole blocks of 4) from a shared
//!   counter; for each unit claimed (its weights stay in L2):
//!     for each group of 6 activation rows (6 · 4K bytes: in L1 while the unit runs)
//!       for each block of 4 weight rows of the unit: one 4 × 6 register tile over all K
//! ```
//!
//! The units are claimed, not dealt out in equal shares, so that a thread the OS preempts
//! (a busy host) delays the product by a unit, not by its whole share.

#[cfg(target_arch = "x86_64")]
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(target_arch = "x86_64")]
use crate::cpu::gemm::MatRef;
#[cfg(target_arch = "x86_64")]
use crate::cpu::packed::x86::avx512_bf16::{self as kernel, A_ROWS, K_STEP, STEP_BYTES, W_ROWS};
#[cfg(target_arch = "x86_64")]
use crate::cpu::threadpool::SharedMut;
#[cfg(target_arch = "x86_64")]
use crate::cpu::ThreadPool;

/// Weight bytes of a unit of work: the blocks a thread runs every activation group over
/// before claiming the next unit (in L2; at least one block).
#[cfg(target_arch = "x86_64")]
const UNIT_BYTES: usize = 256 * 1024;

/// Units per thread at least (smaller units where the matrix is small), for balance.
#[cfg(target_arch = "x86_64")]
const UNITS_PER_THREAD: usize = 4;

/// `y = x · Wᵀ` on the AVX512-BF16 kernel; `buf` holds the split activations.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI and AVX512-BF16 ([`crate::cpu::Isa::bf16_dot_supported`]);
/// `w` is a BF16 matrix with `cols` a multiple of 32, `x` is `m × cols` and `y` `m × rows`.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn matmul(
    pool: &ThreadPool,
    w: &MatRef<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    buf: &mut Vec<u8>,
) {
    let acts = pack(pool, w.cols, x, m, buf);
    let out = SharedMut::new(y);
    let blocks = w.rows.div_ceil(W_ROWS);
    let by_bytes = (UNIT_BYTES / (W_ROWS * 2 * w.cols)).max(1);
    let by_threads = (blocks / (UNITS_PER_THREAD * pool.n_threads())).max(1);
    let unit = by_bytes.min(by_threads);
    let next = AtomicUsize::new(0);
    pool.broadcast(&|_, _| loop {
        let b0 = next.fetch_add(unit, Ordering::Relaxed);
        if b0 >= blocks {
            break;
        }
        // SAFETY: the caller's contract (CPU, shapes); the counter hands each unit of
        // blocks to one thread only, so this thread owns weight rows [4 b0, 4 b1).
        unsafe { run_blocks(w, acts, m, b0..(b0 + unit).min(blocks), &out) };
    });
}

/// Splits the `m` rows of `x` into `buf` ([`STEP_BYTES`] per row and 32-element step), the
/// rows shared out over the threads.
#[cfg(target_arch = "x86_64")]
fn pack<'s>(pool: &ThreadPool, cols: usize, x: &[f32], m: usize, buf: &'s mut Vec<u8>) -> &'s [u8] {
    let steps = cols / K_STEP;
    let row = steps * STEP_BYTES;
    if buf.len() < m * row {
        buf.resize(m * row, 0);
    }
    let shared = SharedMut::new(&mut buf[..m * row]);
    pool.broadcast(&|t, n| {
        for j in m * t / n..m * (t + 1) / n {
            // SAFETY: thread t packs rows [m·t/n, m·(t+1)/n), disjoint across threads.
            let dst = unsafe { shared.slice_mut(j * row, row) };
            let src = &x[j * cols..(j + 1) * cols];
            // SAFETY: the CPU has AVX-512 (the caller of `matmul` guarantees it); `src` holds
            // `steps · 32` floats, `dst` `steps · STEP_BYTES` bytes.
            unsafe { kernel::pack_row(src.as_ptr(), steps, dst.as_mut_ptr()) };
        }
    });
    &buf[..m * row]
}

/// Weight-row blocks `blocks` (of [`W_ROWS`] rows) against every activation row.
///
/// # Safety
/// As [`matmul`]; `acts` holds the `m` split rows; no other thread writes these blocks' rows
/// of `out`.
#[cfg(target_arch = "x86_64")]
unsafe fn run_blocks(
    w: &MatRef<'_>,
    acts: &[u8],
    m: usize,
    blocks: std::ops::Range<usize>,
    out: &SharedMut<'_, f32>,
) {
    let (w_row, steps) = (2 * w.cols, w.cols / K_STEP);
    let a_row = steps * STEP_BYTES;
    for j0 in (0..m).step_by(A_ROWS) {
        let jn = (m - j0).min(A_ROWS);
        let a = acts[j0 * a_row..].as_ptr();
        for b in blocks.clone() {
            let r0 = b * W_ROWS;
            let rn = (w.rows - r0).min(W_ROWS);
            let wp = w.data[r0 * w_row..].as_ptr();
            // SAFETY: rows r0..r0 + rn of `w` and j0..j0 + jn of `acts` exist, each with
            // `steps` steps; the CPU runs the kernel (the caller's contract).
            let res = unsafe { tile(rn, jn, wp, w_row, a, a_row, steps) };
            for (j, rj) in res.iter().enumerate().take(jn) {
                // SAFETY: this thread owns rows [r0, r0 + rn) of output row j0 + j.
                let dst = unsafe { out.slice_mut((j0 + j) * w.rows + r0, rn) };
                dst.copy_from_slice(&rj[..rn]);
            }
        }
    }
}

/// The register tile of `rn` weight rows (1..=4) against `jn` activation rows (1..=6); rows
/// of the result past `jn` are zero.
///
/// # Safety
/// As [`kernel::tile`] for `rn` weight rows and `jn` activation rows.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    rn: usize,
    jn: usize,
    w: *const u8,
    w_stride: usize,
    a: *const u8,
    a_stride: usize,
    steps: usize,
) -> [[f32; W_ROWS]; A_ROWS] {
    macro_rules! go {
        ($r:literal, $j:literal) => {{
            // SAFETY: the caller's contract for `$r` weight rows and `$j` activation rows.
            let t = unsafe { kernel::tile::<$r, $j>(w, w_stride, a, a_stride, steps) };
            let mut o = [[0.0; W_ROWS]; A_ROWS];
            o[..$j].copy_from_slice(&t);
            o
        }};
    }
    macro_rules! by_rows {
        ($j:literal) => {
            match rn {
                4 => go!(4, $j),
                3 => go!(3, $j),
                2 => go!(2, $j),
                _ => go!(1, $j),
            }
        };
    }
    match jn {
        6 => by_rows!(6),
        5 => by_rows!(5),
        4 => by_rows!(4),
        3 => by_rows!(3),
        2 => by_rows!(2),
        _ => by_rows!(1),
    }
}
