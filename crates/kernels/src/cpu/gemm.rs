//! Matrix products against (quantized) weight matrices: `y = x · Wᵀ`.
//!
//! ```text
//!   x: m × cols (f32)   ──quantize once per row──▶  a: m × act_row_bytes (ActFormat)
//!   W: rows × cols (dtype blocks, row-major)
//!   y[j][r] = vec_dot(cols, W[r], a[j])           y: m × rows (f32)
//!
//!   threads split r:  | t0: rows 0..R/n | t1: rows R/n..2R/n | ... |
//!   inside a thread:  for each tile of weight rows (≈ TILE_BYTES, stays in L1/L2)
//!                       for each x row j: for each r in the tile: y[j][r] = ...
//! ```
//!
//! The weight matrix is streamed from memory once per call whatever `m` is; the quantized
//! activations (small) are re-read from cache for each weight tile.
//!
//! When `m > 1` and the dtype has a [`VecDotTileFn`], the inner loops go 4 × 4 instead:
//! one call computes `y[j..j+4][r..r+4]`, unpacking each weight block once for 4 x rows
//! (partial blocks repeat their last row; thread boundaries are multiples of 4 rows).
//!
//! When `m == 1` (decode) and the dtype has a [`VecDotRowsFn`], one call computes
//! `y[0][r..r+4]`: four weight rows stream from memory together against one activation row,
//! which keeps more loads in flight and loads each activation block once per 4 rows.

use crate::cpu::packed::PackedActs;
use crate::cpu::threadpool::SharedMut;
use crate::cpu::{Isa, ThreadPool, WorkRanges};
pub use crate::quant::VecDotRowsFn;
use crate::quant::{self, act::ActKernels, ActFormat, DType, TypeKernels, VecDotTileFn, TILE};

/// A weight type's row dot product (see [`TypeKernels::vec_dot`]).
type VecDotFn = fn(usize, &[u8], &[u8]) -> f32;

/// Weight bytes per tile: a tile is reused for every x row while it sits in L1/L2.
const TILE_BYTES: usize = 16 * 1024;

/// Rows per thread below which activations are quantized serially.
pub(crate) const PARALLEL_QUANT_ROWS: usize = 4;

/// A row-major matrix of `rows × cols` elements of `dtype`, each row
/// `dtype.row_bytes(cols)` bytes.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

/// Reusable buffers for [`matmul`] (quantized activations); grows as needed, never shrinks.
#[derive(Default)]
pub struct Scratch {
    pub(crate) act: Vec<u8>,
    /// The activations of packed products ([`crate::cpu::packed`]).
    pub(crate) packed: PackedActs,
    /// How packed products share their panels out over the threads.
    pub(crate) ranges: WorkRanges,
}

/// An activation quantizer: `f32` row in, `ActFormat` bytes out.
pub type QuantizeFn = fn(&[f32], &mut [u8]);

/// The kernels one matrix product needs: the weight type's dot product and, for quantized
/// activation formats, the activation quantizer.
#[derive(Clone, Copy)]
pub struct GemmKernels {
    pub weights: TypeKernels,
    /// `None` when the activation format is plain `f32` (used as is, no copy).
    pub quantize: Option<QuantizeFn>,
}

impl GemmKernels {
    /// The kernels for `dtype` compiled for `isa` (tests use this to cover every variant).
    pub fn for_isa(dtype: DType, isa: Isa) -> GemmKernels {
        let weights = TypeKernels::for_isa(dtype, isa);
        let quantize = (weights.act != ActFormat::F32)
            .then(|| ActKernels::for_isa(isa).quantize[weights.act as usize]);
        GemmKernels { weights, quantize }
    }

    /// The kernels for `dtype` on this CPU.
    pub fn detected(dtype: DType) -> GemmKernels {
        let weights = *quant::kernels(dtype);
        let quantize = (weights.act != ActFormat::F32)
            .then(|| quant::act::kernels().quantize[weights.act as usize]);
        GemmKernels { weights, quantize }
    }
}

/// `y (m × w.rows, row-major) = x (m × w.cols, row-major) · Wᵀ`. Quantizes each x row once
/// into the dtype's [`ActFormat`], then splits output rows over the pool's threads. Products
/// of BF16 weights with many rows go to AMX-BF16 tiles where the CPU has them
/// ([`super::bf16_tiles`]: the activations rounded to bf16).
///
/// Panics if the slice lengths do not match the shapes or `w.cols` is not a whole number of
/// blocks.
pub fn matmul(
    pool: &ThreadPool,
    w: MatRef<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut Scratch,
) {
    if super::bf16_tiles::takes(&w, m) {
        return super::bf16_tiles::matmul_bf16_tiles(pool, w, x, m, y, scratch);
    }
    matmul_with(pool, &GemmKernels::detected(w.dtype), w, x, m, y, scratch)
}

/// [`matmul`] with explicit kernels (which must be for `w.dtype`).
pub fn matmul_with(
    pool: &ThreadPool,
    k: &GemmKernels,
    w: MatRef<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut Scratch,
) {
    let w_row = check_shapes(k, &w, x, m, y);
    if m == 0 || w.rows == 0 {
        return;
    }
    let act = k.weights.act;
    let a_row = act.row_bytes(w.cols);
    let acts: &[u8] = match k.quantize {
        Some(q) => quantize_rows(pool, q, x, m, w.cols, a_row, &mut scratch.act),
        None => f32_bytes(x, scratch),
    };
    let rows = RowsRef {
        w,
        w_row,
        acts,
        a_row,
        m,
    };
    let out = SharedMut::new(y);
    if let Some(rows_fn) = k.weights.vec_dot_rows.filter(|_| m == 1) {
        pool.broadcast(&|t, n| {
            let (r0, r1) = thread_rows(w.rows, t, n, TILE);
            rows.gemv(rows_fn, r0, r1, &out);
        });
        return;
    }
    match k.weights.vec_dot_tile.filter(|_| m > 1) {
        Some(tile_fn) => pool.broadcast(&|t, n| {
            let (r0, r1) = thread_rows(w.rows, t, n, TILE);
            rows.tiled(tile_fn, r0, r1, &out);
        }),
        None => pool.broadcast(&|t, n| {
            let (r0, r1) = thread_rows(w.rows, t, n, 1);
            rows.per_row(k.weights.vec_dot, r0, r1, &out);
        }),
    }
}

/// Rows `[r0, r1)` of `rows` for thread `t` of `n`, boundaries rounded to multiples of
/// `align` (the last thread takes the remainder).
fn thread_rows(rows: usize, t: usize, n: usize, align: usize) -> (usize, usize) {
    let cut = |t: usize| {
        if t == n {
            rows
        } else {
            (rows * t / n) / align * align
        }
    };
    (cut(t), cut(t + 1))
}

/// The operands of one product, as rows of bytes.
#[derive(Clone, Copy)]
struct RowsRef<'a> {
    w: MatRef<'a>,
    w_row: usize,
    acts: &'a [u8],
    a_row: usize,
    m: usize,
}

impl RowsRef<'_> {
    fn weight(&self, r: usize) -> &[u8] {
        &self.w.data[r * self.w_row..(r + 1) * self.w_row]
    }

    fn act(&self, j: usize) -> &[u8] {
        &self.acts[j * self.a_row..(j + 1) * self.a_row]
    }

    /// Weight tiles of `rows` ≈ [`TILE_BYTES`] bytes in `[r0, r1)`.
    fn cache_tiles(
        &self,
        r0: usize,
        r1: usize,
        align: usize,
    ) -> impl Iterator<Item = (usize, usize)> {
        let rows = (TILE_BYTES / self.w_row.max(1) / align * align).max(align);
        (r0..r1).step_by(rows).map(move |t| (t, (t + rows).min(r1)))
    }

    /// One `vec_dot` per (weight row, activation row) pair of weight rows `[r0, r1)`.
    fn per_row(&self, vec_dot: VecDotFn, r0: usize, r1: usize, out: &SharedMut<'_, f32>) {
        let (rows, cols) = (self.w.rows, self.w.cols);
        for (t0, t1) in self.cache_tiles(r0, r1, 1) {
            for j in 0..self.m {
                let a = self.act(j);
                for r in t0..t1 {
                    let v = vec_dot(cols, self.weight(r), a);
                    // SAFETY: thread t writes only columns [r0, r1) of y, and the ranges
                    // `thread_rows` gives different threads are disjoint.
                    unsafe { out.write(j * rows + r, v) };
                }
            }
        }
    }

    /// `m == 1`: groups of [`TILE`] weight rows `[r0, r1)` against activation row 0; a
    /// partial group repeats its last row and discards the duplicate results.
    fn gemv(&self, rows_fn: VecDotRowsFn, r0: usize, r1: usize, out: &SharedMut<'_, f32>) {
        let a = self.act(0);
        for rb in (r0..r1).step_by(TILE) {
            let w: [&[u8]; TILE] = std::array::from_fn(|q| self.weight((rb + q).min(r1 - 1)));
            let v = rows_fn(self.w.cols, w, a);
            for (p, &x) in v.iter().enumerate().take(r1 - rb) {
                // SAFETY: as in `per_row`: rb + p < r1, this thread's rows.
                unsafe { out.write(rb + p, x) };
            }
        }
    }

    /// [`TILE`] × [`TILE`] blocks of weight rows `[r0, r1)`: partial blocks repeat their
    /// last row and discard the duplicate results.
    fn tiled(&self, tile_fn: VecDotTileFn, r0: usize, r1: usize, out: &SharedMut<'_, f32>) {
        let (rows, cols, m) = (self.w.rows, self.w.cols, self.m);
        for (t0, t1) in self.cache_tiles(r0, r1, TILE) {
            for j0 in (0..m).step_by(TILE) {
                let a: [&[u8]; TILE] = std::array::from_fn(|q| self.act((j0 + q).min(m - 1)));
                for rb in (t0..t1).step_by(TILE) {
                    let w: [&[u8]; TILE] =
                        std::array::from_fn(|q| self.weight((rb + q).min(t1 - 1)));
                    let v = tile_fn(cols, w, a);
                    for (q, vj) in v.iter().enumerate().take(m - j0) {
                        for (p, &x) in vj.iter().enumerate().take(t1 - rb) {
                            // SAFETY: as in `per_row`: rb + p < t1 <= r1, this thread's rows.
                            unsafe { out.write((j0 + q) * rows + rb + p, x) };
                        }
                    }
                }
            }
        }
    }
}

/// Validates shapes; returns the weight row size in bytes.
fn check_shapes(k: &GemmKernels, w: &MatRef<'_>, x: &[f32], m: usize, y: &[f32]) -> usize {
    assert_eq!(
        k.weights.dtype, w.dtype,
        "matmul: kernels are for another dtype"
    );
    let w_row = w.dtype.row_bytes(w.cols).unwrap_or_else(|| {
        panic!(
            "matmul: {} cols is not a whole number of {} blocks",
            w.cols, w.dtype
        )
    });
    assert!(
        w.cols.is_multiple_of(k.weights.act.block_size()),
        "matmul: {} cols is not a whole number of activation blocks",
        w.cols
    );
    assert_eq!(
        w.data.len(),
        w.rows * w_row,
        "matmul: weight data size mismatch"
    );
    assert_eq!(x.len(), m * w.cols, "matmul: x must be m × cols");
    assert_eq!(y.len(), m * w.rows, "matmul: y must be m × rows");
    w_row
}

/// Quantize the `m` rows of `x` into `act`, in parallel when there are enough rows.
pub(crate) fn quantize_rows<'s>(
    pool: &ThreadPool,
    quantize: QuantizeFn,
    x: &[f32],
    m: usize,
    cols: usize,
    a_row: usize,
    act: &'s mut Vec<u8>,
) -> &'s [u8] {
    if act.len() < m * a_row {
        act.resize(m * a_row, 0);
    }
    let buf = &mut act[..m * a_row];
    if m < PARALLEL_QUANT_ROWS * pool.n_threads() {
        for (src, dst) in x.chunks_exact(cols).zip(buf.chunks_exact_mut(a_row)) {
            quantize(src, dst);
        }
    } else {
        let shared = SharedMut::new(buf);
        pool.broadcast(&|t, n| {
            for j in m * t / n..m * (t + 1) / n {
                // SAFETY: thread t quantizes rows [m·t/n, m·(t+1)/n), disjoint across t,
                // and each row owns bytes [j·a_row, (j+1)·a_row).
                let dst = unsafe { shared.slice_mut(j * a_row, a_row) };
                quantize(&x[j * cols..(j + 1) * cols], dst);
            }
        });
    }
    &act[..m * a_row]
}

/// `x` as little-endian bytes: a zero-copy view on little-endian targets.
fn f32_bytes<'s>(x: &'s [f32], scratch: &'s mut Scratch) -> &'s [u8] {
    if cfg!(target_endian = "little") {
        bytemuck::cast_slice(x)
    } else {
        scratch.act.clear();
        scratch.act.extend(x.iter().flat_map(|v| v.to_le_bytes()));
        &scratch.act
    }
}
