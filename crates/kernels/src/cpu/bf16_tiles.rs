//! Products of BF16 weights with several activation rows on AMX-BF16 tiles (`tdpbf16ps`) or,
//! without AMX-BF16, AVX512-BF16 dot products (`vdpbf16ps`), chosen once at run time
//! ([`Bf16Kernel`]); CPUs with neither keep the 4 × 4 FMA tiles of `quant::float_tile` (`f32`
//! activations).
//!
//! Each activation is split into two bf16 parts ([`split_bf16`]: hi = bf16(x), lo = bf16(x −
//! hi), 16 significant bits together instead of one bf16's 8) and the weights multiply both,
//! at twice the tile products of rounding the activations to one bf16 as llama.cpp does for
//! BF16 weights: an activation's relative error is at most 2⁻¹⁷ instead of 2⁻⁹, so that
//! prompts of [`MIN_ROWS`] or more tokens (this path) and fewer (`f32` activations) give the
//! same logits to about `f32` rounding and the same greedy tokens. Every product of two bf16
//! values is exact in `f32`; the tile unit sums them in `f32`. The spec is [`matmul_bf16_ref`]:
//! the exact products of the weights and `hi + lo` summed in `f64`, rounded once. The path is
//! taken ([`takes`]) for BF16 weights, at least [`MIN_ROWS`] rows, whole 32-element steps, on
//! a CPU with AMX-BF16 or AVX512-BF16.
//!
//! Error against the spec, per output `y[j][r]` with `S = Σ_k |W[r][k]| · |x[j][k]|`, `u =
//! 2⁻²⁴` (half an `f32` ulp at 1) and `K` the row length:
//!
//! - AVX512-BF16 ([`Bf16Kernel::Avx512Bf16`], the blocking in `bf16_dot`): `vdpbf16ps` adds
//!   a lane's two products to its accumulator one at a time, each addition rounded to
//!   nearest-even (Intel's pseudo-code: odd element first, then even), with denormal inputs
//!   and outputs flushed to zero. A lane sums `K / 8` products (hi and lo parts of `K / 16`
//!   elements pairs) and the 16 lanes are added in 4 rounds, so with `|hi| + |lo| ≤ (1 +
//!   2⁻⁸)|x|` the sums err by at most `γ(K/8 + 4) · (1 + 2⁻⁸) S ≤ (K/8 + 5) u S` (for `K ≤
//!   2²⁰`), and the spec's single rounding by `u |y|`. Flushing adds at most `2⁻¹²⁶` per
//!   flushed operand, product or sum: at most `2⁻¹²⁶ (Σ_k (2|W[r][k]| + 2|x[j][k]|) + 3K)`.
//!   Bound: `|y − spec| ≤ (K/8 + 6) u S + 2⁻¹²⁶ (Σ_k 2(|W[r][k]| + |x[j][k]|) + 3K)`.
//! - AMX ([`Bf16Kernel::Amx`]): the tile unit sums the exact products in `f32`, so the error
//!   is of the order of `K u S` (the tests allow `(K + 32) · 2u · S`).
//!
//! ```text
//!   x (m × K f32) ──split, pair-pack──▶ groups of 32 rows: per 32-element step 2 + 2 B tiles
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
use crate::cpu::packed::x86::amx::bf16::{
    self as tiles, PanelOut, B_TILE_BYTES, K_STEP, ROWS, STEP_BYTES,
};

/// Products of fewer activation rows keep `f32` activations (the 4 × 4 FMA tiles): below a
/// tile's 16 rows the tile products would mostly multiply padding.
pub const MIN_ROWS: usize = 16;

/// Weight bytes of the panels a thread runs every activation group over before moving on.
#[cfg(target_arch = "x86_64")]
const CHUNK_BYTES: usize = 768 * 1024;

/// The kernels of these products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Kernel {
    /// AMX-BF16 tile products.
    Amx,
    /// AVX512-BF16 dot products (`vdpbf16ps`), 4 weight rows × 6 activation rows a register
    /// tile.
    Avx512Bf16,
}

impl Bf16Kernel {
    /// The kernel this process uses: AMX where [`Isa::bf16_tiles`] holds, else AVX512-BF16
    /// where [`Isa::bf16_dot`] holds.
    pub fn detected() -> Option<Bf16Kernel> {
        if Isa::bf16_tiles() {
            Some(Bf16Kernel::Amx)
        } else {
            Isa::bf16_dot().then_some(Bf16Kernel::Avx512Bf16)
        }
    }

    /// Every kernel this CPU can run (tests compare each with the spec).
    pub fn available() -> Vec<Bf16Kernel> {
        let mut v = Vec::new();
        if Isa::bf16_tiles_supported() {
            v.push(Bf16Kernel::Amx);
        }
        if Isa::bf16_dot_supported() {
            v.push(Bf16Kernel::Avx512Bf16);
        }
        v
    }

    fn supported(self) -> bool {
        match self {
            Bf16Kernel::Amx => Isa::bf16_tiles_supported(),
            Bf16Kernel::Avx512Bf16 => Isa::bf16_dot_supported(),
        }
    }
}

/// Whether `kernel` can take a product of `m` activation rows with `w`: BF16 weights, at
/// least [`MIN_ROWS`] rows, whole 32-element steps.
fn fits(w: &MatRef<'_>, m: usize) -> bool {
    w.dtype == DType::BF16 && m >= MIN_ROWS && w.rows > 0 && w.cols > 0 && w.cols.is_multiple_of(32)
}

/// Whether [`crate::cpu::gemm::matmul`] takes a product of `m` activation rows with `w`
/// through these kernels (one of them is [`Bf16Kernel::detected`]).
pub fn takes(w: &MatRef<'_>, m: usize) -> bool {
    fits(w, m) && Bf16Kernel::detected().is_some()
}

/// `x` as two bf16 values, `(hi, lo)`: hi = bf16(x), lo = bf16(x − hi) (nearest, ties to
/// even; lo = 0 where x − hi is NaN, that is where x is not finite). `hi + lo` is what the
/// products see.
pub fn split_bf16(x: f32) -> (f32, f32) {
    let hi = half::bf16::from_f32(x).to_f32();
    let d = x - hi;
    let lo = if d.is_nan() {
        0.0
    } else {
        half::bf16::from_f32(d).to_f32()
    };
    (hi, lo)
}

/// The spec of the tile products: `y[j][r] = Σ_k W[r][k] · (hi + lo)(x[j][k])` with
/// [`split_bf16`]'s parts, the exact products summed in `f64` and rounded once to `f32`.
///
/// Panics if `w` is not BF16 or the lengths do not match the shapes.
pub fn matmul_bf16_ref(w: MatRef<'_>, x: &[f32], m: usize, y: &mut [f32]) {
    check(&w, x, m, y);
    let xr: Vec<f64> = x
        .iter()
        .map(|&v| {
            let (hi, lo) = split_bf16(v);
            hi as f64 + lo as f64
        })
        .collect();
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

/// `y = x · Wᵀ` with the detected kernel, to the spec [`matmul_bf16_ref`] (up to the order
/// of the `f32` sums).
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
    let kernel = Bf16Kernel::detected().expect("bf16 tiles: no BF16 kernel on this CPU");
    matmul_bf16_with(pool, kernel, w, x, m, y, scratch)
}

/// [`matmul_bf16_tiles`] with an explicit kernel (tests cover each with this).
///
/// Panics unless the CPU runs `kernel`, the product fits (BF16, at least [`MIN_ROWS`] rows,
/// whole 32-element steps) and the lengths match.
pub fn matmul_bf16_with(
    pool: &ThreadPool,
    kernel: Bf16Kernel,
    w: MatRef<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut Scratch,
) {
    check(&w, x, m, y);
    assert!(
        kernel.supported() && fits(&w, m),
        "bf16 tiles: {kernel:?} cannot take this product"
    );
    #[cfg(target_arch = "x86_64")]
    if kernel == Bf16Kernel::Avx512Bf16 {
        // SAFETY: the CPU runs AVX512-BF16 (`supported`, which implies AVX-512 F/BW/VL/VNNI);
        // `w` is BF16 with whole 32-element steps (`fits`) and the lengths match (`check`).
        unsafe { super::bf16_dot::matmul(pool, &w, x, m, y, &mut scratch.act) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let packed = pack(pool, w.cols, x, m, &mut scratch.act);
        let out = SharedMut::new(y);
        let panels = w.rows.div_ceil(ROWS);
        pool.broadcast(&|t, n| {
            let (p0, p1) = (panels * t / n, panels * (t + 1) / n);
            run_panels(kernel, &w, packed, m, p0..p1, &out);
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (pool, scratch);
        unreachable!("`takes` holds only on x86-64");
    }
}

/// Bytes of one group's packed activations: hi and lo B tiles per 32-element step.
#[cfg(target_arch = "x86_64")]
fn group_bytes(cols: usize) -> usize {
    cols / K_STEP * STEP_BYTES
}

/// Splits and packs the `m` rows of `x` into `buf` (groups of 32 rows, zero rows past `m`),
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
    assert_eq!(
        dst.len(),
        steps * STEP_BYTES,
        "bf16 tiles: group buffer size"
    );
    for n in 0..ROWS {
        let j = g * ROWS + n;
        let tile = (n / 16) * B_TILE_BYTES;
        if j >= m {
            for s in 0..steps {
                for part in [0, 2 * B_TILE_BYTES] {
                    let t = &mut dst[s * STEP_BYTES + part + tile..][..B_TILE_BYTES];
                    t.chunks_exact_mut(64)
                        .for_each(|line| line[4 * (n % 16)..4 * (n % 16) + 4].fill(0));
                }
            }
            continue;
        }
        let row = &x[j * cols..(j + 1) * cols];
        // SAFETY: a BF16 kernel runs (each implies AVX-512 F/BW); `row` holds `steps · 32`
        // floats; the hi and lo tiles at `dst + tile + s · STEP_BYTES` lie within `dst` (its
        // length checked).
        unsafe { tiles::pack_row(row.as_ptr(), steps, dst.as_mut_ptr().add(tile), n % 16) };
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
    kernel: Bf16Kernel,
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
                    let (ap, steps, two) = (a.as_ptr(), w.cols / K_STEP, rows_n > 16);
                    // SAFETY: the CPU runs `kernel` (checked by the caller); `a` holds 32 rows
                    // of `w_row` bytes (`cols / 32` steps of 64 bytes), `b` the group's tiles.
                    unsafe {
                        match kernel {
                            Bf16Kernel::Amx => {
                                tiles::panel(ap, w_row, steps, b.as_ptr(), two, &mut res)
                            }
                            Bf16Kernel::Avx512Bf16 => unreachable!("runs in `bf16_dot`"),
                        }
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
