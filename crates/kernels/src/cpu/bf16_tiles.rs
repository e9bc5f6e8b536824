//! Products of BF16 weights with several activation rows on AMX-BF16 tiles (`tdpbf16ps`).
//!
//! The activations are rounded to bf16 (nearest, ties to even: [`round_bf16`]), as llama.cpp
//! does for BF16 weights, and every product of two bf16 values is exact in `f32`; the tile
//! unit sums them in `f32`. The spec is [`matmul_bf16_ref`]: the exact products of the bf16
//! weights and the rounded activations summed in `f64`, rounded once. Products that take this
//! path ([`takes`]: BF16 weights, at least [`MIN_ROWS`] rows, whole 32-element steps, a CPU
//! with AMX-BF16) therefore differ from the `f32`-activation path of fewer rows by the
//! rounding of the activations (relative 2⁻⁹ an element).
//!
//! ```text
//!   x (m × K f32) ──round, pair-pack──▶ groups of 32 rows: per 32-element step two B tiles
//!   W (rows × K bf16, as loaded)        panels of 32 rows, read in place as A tiles
//!   threads split the panels; each thread: for each chunk of panels (≈ CHUNK_BYTES, in L2)
//!     for each group of activation rows: for each panel of the chunk: 32 × 32 results
//! ```
//!
//! A panel that would run past the last weight row is copied into a zero-padded buffer of 32
//! rows first, so the tile loads never read past the matrix.

#[cfg(target_arch = "x86_64")]
use std::cell::RefCell;

use crate::cpu::gemm::{MatRef, Scratch};
#[cfg(target_arch = "x86_64")]
use crate::cpu::threadpool::SharedMut;
use crate::cpu::{Isa, ThreadPool};
use crate::quant::DType;

#[cfg(target_arch = "x86_64")]
use crate::cpu::packed::x86::amx::bf16::{self as kernel, PanelOut, B_TILE_BYTES, K_STEP, ROWS};

/// Products of fewer activation rows keep `f32` activations (the 4 × 4 FMA tiles): below a
/// tile's 16 rows the tile products would mostly multiply padding.
pub const MIN_ROWS: usize = 16;

/// Weight bytes of the panels a thread runs every activation group over before moving on.
#[cfg(target_arch = "x86_64")]
const CHUNK_BYTES: usize = 768 * 1024;

/// Whether [`crate::cpu::gemm::matmul`] takes a product of `m` activation rows with `w`
/// through the tiles.
pub fn takes(w: &MatRef<'_>, m: usize) -> bool {
    w.dtype == DType::BF16
        && m >= MIN_ROWS
        && w.rows > 0
        && w.cols > 0
        && w.cols.is_multiple_of(32)
        && Isa::bf16_tiles()
}

/// `x` rounded to bf16 (nearest, ties to even) and back to `f32`: the activations the tile
/// products see.
pub fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// The spec of the tile products: `y[j][r] = Σ_k W[r][k] · round_bf16(x[j][k])`, the exact
/// products summed in `f64` and rounded once to `f32`.
///
/// Panics if `w` is not BF16 or the lengths do not match the shapes.
pub fn matmul_bf16_ref(w: MatRef<'_>, x: &[f32], m: usize, y: &mut [f32]) {
    check(&w, x, m, y);
    let xr: Vec<f64> = x.iter().map(|&v| round_bf16(v) as f64).collect();
    for (r, wr) in w.data.chunks_exact(2 * w.cols).enumerate() {
        let wf: Vec<f64> = wr
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect();
        for (j, xj) in xr.chunks_exact(w.cols).enumerate() {
            let s: f64 = wf.iter().zip(xj).map(|(a, b)| a * b).sum();
            y[j * w.rows + r] = s as f32;
        }
    }
}

/// Panics unless `w` is a BF16 matrix of its shape, `x` is `m × cols` and `y` `m × rows`.
fn check(w: &MatRef<'_>, x: &[f32], m: usize, y: &[f32]) {
    assert_eq!(w.dtype, DType::BF16, "bf16 tiles: weights must be BF16");
    assert_eq!(w.data.len(), 2 * w.rows * w.cols, "bf16 tiles: weight size");
    assert_eq!(x.len(), m * w.cols, "bf16 tiles: x must be m × cols");
    assert_eq!(y.len(), m * w.rows, "bf16 tiles: y must be m × rows");
}

/// `y = x · Wᵀ` on AMX-BF16 tiles, to the spec [`matmul_bf16_ref`] (up to the order of the
/// `f32` sums).
///
/// Panics unless [`takes`] holds (the CPU, the dtype, the shapes) and the lengths match.
pub fn matmul_bf16_tiles(
    pool: &ThreadPool,
    w: MatRef<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut Scratch,
) {
    check(&w, x, m, y);
    assert!(takes(&w, m), "bf16 tiles: not available for this product");
    #[cfg(target_arch = "x86_64")]
    {
        let packed = pack(pool, w.cols, x, m, &mut scratch.act);
        let out = SharedMut::new(y);
        let panels = w.rows.div_ceil(ROWS);
        pool.broadcast(&|t, n| {
            let (p0, p1) = (panels * t / n, panels * (t + 1) / n);
            run_panels(&w, packed, m, p0..p1, &out);
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (pool, scratch);
        unreachable!("`takes` holds only on x86-64");
    }
}

/// Bytes of one group's packed activations: two B tiles per 32-element step.
#[cfg(target_arch = "x86_64")]
fn group_bytes(cols: usize) -> usize {
    cols / K_STEP * 2 * B_TILE_BYTES
}

/// Rounds and packs the `m` rows of `x` into `buf` (groups of 32 rows, zero rows past `m`),
/// the groups shared out over the threads.
#[cfg(target_arch = "x86_64")]
fn pack<'s>(pool: &ThreadPool, cols: usize, x: &[f32], m: usize, buf: &'s mut Vec<u8>) -> &'s [u8] {
    let (groups, gb) = (m.div_ceil(ROWS), group_bytes(cols));
    if buf.len() < groups * gb {
        buf.resize(groups * gb, 0);
    }
    let shared = SharedMut::new(&mut buf[..groups * gb]);
    pool.broadcast(&|t, n| {
        for g in groups * t / n..groups * (t + 1) / n {
            // SAFETY: thread t packs groups [groups·t/n, groups·(t+1)/n), disjoint across
            // threads; group g owns bytes [g·gb, (g+1)·gb).
            let dst = unsafe { shared.slice_mut(g * gb, gb) };
            pack_group(cols, x, m, g, dst);
        }
    });
    &buf[..groups * gb]
}

/// Packs group `g`'s 32 activation rows into `dst` (rows past `m` as zeros).
#[cfg(target_arch = "x86_64")]
fn pack_group(cols: usize, x: &[f32], m: usize, g: usize, dst: &mut [u8]) {
    let steps = cols / K_STEP;
    assert_eq!(dst.len(), steps * 2 * B_TILE_BYTES, "bf16 tiles: group buffer size");
    for n in 0..ROWS {
        let j = g * ROWS + n;
        let tile = (n / 16) * B_TILE_BYTES;
        if j >= m {
            for s in 0..steps {
                let t = &mut dst[s * 2 * B_TILE_BYTES + tile..][..B_TILE_BYTES];
                t.chunks_exact_mut(64)
                    .for_each(|line| line[4 * (n % 16)..4 * (n % 16) + 4].fill(0));
            }
            continue;
        }
        let row = &x[j * cols..(j + 1) * cols];
        // SAFETY: `takes` held (AMX-BF16 implies AVX-512 F/BW); `row` holds `steps · 32`
        // floats; the tiles at `dst + tile + s · 2048` lie within `dst` (its length checked).
        unsafe {
            kernel::pack_row(
                row.as_ptr(),
                steps,
                dst.as_mut_ptr().add(tile),
                2 * B_TILE_BYTES,
                n % 16,
            )
        };
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// A zero-padded copy of the last panel when the matrix ends inside it.
    static TAIL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Panels `panels` of `w` against every group of `packed`, results into `out`.
#[cfg(target_arch = "x86_64")]
fn run_panels(
    w: &MatRef<'_>,
    packed: &[u8],
    m: usize,
    panels: std::ops::Range<usize>,
    out: &SharedMut<'_, f32>,
) {
    let w_row = 2 * w.cols;
    let chunk = (CHUNK_BYTES / (ROWS * w_row)).max(1);
    let (gb, groups) = (group_bytes(w.cols), m.div_ceil(ROWS));
    let mut res: PanelOut = [[0.0; ROWS]; ROWS];
    TAIL.with_borrow_mut(|tail| {
        for c0 in panels.clone().step_by(chunk) {
            for g in 0..groups {
                let b = &packed[g * gb..(g + 1) * gb];
                let rows_n = (m - g * ROWS).min(ROWS);
                for p in c0..(c0 + chunk).min(panels.end) {
                    let r0 = p * ROWS;
                    let rows_r = (w.rows - r0).min(ROWS);
                    let a = if rows_r == ROWS {
                        &w.data[r0 * w_row..(r0 + ROWS) * w_row]
                    } else {
                        padded_tail(w, r0, tail)
                    };
                    // SAFETY: `takes` held (AMX-BF16 granted); `a` holds 32 rows of `w_row`
                    // bytes (`cols / 32` steps of 64 bytes), `b` the group's tiles.
                    unsafe {
                        kernel::panel(
                            a.as_ptr(),
                            w_row,
                            w.cols / K_STEP,
                            b.as_ptr(),
                            rows_n > 16,
                            &mut res,
                        )
                    };
                    for (n, rn) in res.iter().enumerate().take(rows_n) {
                        let j = g * ROWS + n;
                        // SAFETY: this thread owns weight rows [r0, r0 + rows_r) of every
                        // output row (the panels of different threads are disjoint).
                        let dst = unsafe { out.slice_mut(j * w.rows + r0, rows_r) };
                        dst.copy_from_slice(&rn[..rows_r]);
                    }
                }
            }
        }
    });
}

/// Rows `r0..` of `w` (fewer than 32) copied into `tail`, zero-padded to 32 rows.
#[cfg(target_arch = "x86_64")]
fn padded_tail<'t>(w: &MatRef<'_>, r0: usize, tail: &'t mut Vec<u8>) -> &'t [u8] {
    let w_row = 2 * w.cols;
    tail.clear();
    tail.extend_from_slice(&w.data[r0 * w_row..]);
    tail.resize(ROWS * w_row, 0);
    tail
}
