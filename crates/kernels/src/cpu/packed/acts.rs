//! Activations for the packed kernels: the rows quantized exactly as the GGUF kernels quantize
//! them ([`ActFormat::Q8_0`], [`ActFormat::Q8_1`] for Q4_1, [`ActFormat::Q8K`] for Q4_K),
//! stored as separate arrays so the kernels broadcast 4 quants at a time and read each block's
//! constants as scalars.

use super::PackedKind;
use crate::cpu::gemm::PARALLEL_QUANT_ROWS;
use crate::cpu::threadpool::SharedMut;
use crate::cpu::ThreadPool;
use crate::quant::act::BlockQ8_1;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::q8_k::BlockQ8K;
use crate::quant::ActFormat;

/// `m` quantized activation rows of `cols` values (`nb = cols / block` blocks per row, where a
/// block is 32 values, or 256 for Q8_K).
#[derive(Default)]
pub struct PackedActs {
    /// `m × cols` quants, from a cache-line boundary (so the tile kernel's 32-byte rows never
    /// straddle two lines).
    pub(super) q: AlignedQuants,
    /// `m × cols` (Q6_K's activations only): `q + 128` as unsigned bytes (`q` with its sign bit flipped),
    /// the activation operand where the weights are the signed one (the AVX2 Q6_K kernel's
    /// path for many rows, whose offset then lies in the weights' own sums).
    pub(super) qu: AlignedQuants,
    /// `m × nb` block scales.
    pub(super) d: Vec<f32>,
    /// `m × nb × 8` (Q8_K only): the quant sum of each 32-value sub-block, which multiplies the
    /// Q4_K sub-block's minimum (at most 32 · 127 in size, so an `i16`).
    pub(super) sub_sums: Vec<i16>,
    /// `m × nb × 16` (Q8_K only): the quant sum of each 16-value sub-block (Q8_K's `bsums`),
    /// which the Q6_K offset of 32 multiplies.
    pub(super) bsums: Vec<i16>,
    /// `m × nb × 16` (Q6_K's activations only): `−32 · bsums`, where the Q6_K kernels start each
    /// sub-block's integer sum, so that the stored quants' sum ends as the signed ones'.
    pub(super) offset_sums: Vec<i32>,
    /// `m × nb`: the weights' unsigned offset times the block's quant sum (`8·Σq` for Q4_0,
    /// `128·Σq` for Q8_0), subtracted from the integer dot product; 0 for Q4_1.
    pub(super) corr: Vec<i32>,
    /// `m × nb`: Q8_1's `s = d·Σq` (Q4_1 only; multiplies the weight block's minimum).
    pub(super) s: Vec<f32>,
    /// The same quants block-major (`nb × m` blocks): the tile kernel's A operand, 16 rows of
    /// one block at one place (strided rows would share a few L1 sets). Q8_K's 256-value
    /// blocks go a quarter at a time: block `i`'s elements `64k..64k + 64` of all `m` rows,
    /// row after row, then the next quarter, so that one tile's 16 rows of a quarter are 1 KiB
    /// in a row, and [`BLOCK_MAJOR_PAD`] lines after the last, so that 16 rows from any row on
    /// stay in bounds.
    pub(super) q_bm: AlignedQuants,
    /// Rows (`m`).
    pub(super) rows: usize,
    /// `d` and `s` block-major (`nb × m`, then [`BLOCK_MAJOR_PAD`] zeros): the tile kernel
    /// reads one block's constants for 16 consecutive rows from one place.
    pub(super) d_bm: Vec<f32>,
    pub(super) s_bm: Vec<f32>,
    /// `sub_sums` block-major (`nb × m × 8`, then [`BLOCK_MAJOR_PAD`] rows of zeros; Q8_K
    /// only).
    pub(super) sub_sums_bm: Vec<i16>,
}

/// One cache line of quants.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([i8; 64]);

/// A growable run of `i8` that starts on a cache-line boundary.
#[derive(Default)]
pub(super) struct AlignedQuants {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedQuants {
    /// `len` quants (the new ones zero).
    fn resize(&mut self, len: usize) {
        self.lines.resize(len.div_ceil(64), Line([0; 64]));
        self.len = len;
    }
}

impl std::ops::Deref for AlignedQuants {
    type Target = [i8];

    fn deref(&self) -> &[i8] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl std::ops::DerefMut for AlignedQuants {
    fn deref_mut(&mut self) -> &mut [i8] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

/// Zeros after the block-major arrays, so that 16 rows from any row on stay in bounds.
pub(super) const BLOCK_MAJOR_PAD: usize = 16;

/// `src` (`m × nb` runs of `width` values, row-major) block-major into `dst` (`nb × m` runs,
/// then [`BLOCK_MAJOR_PAD`] runs of zeros).
fn block_major<T: Copy + Default>(src: &[T], m: usize, nb: usize, width: usize, dst: &mut Vec<T>) {
    dst.clear();
    dst.resize((nb * m + BLOCK_MAJOR_PAD) * width, T::default());
    for (a, row) in src[..m * nb * width].chunks_exact(nb * width).enumerate() {
        for (i, run) in row.chunks_exact(width).enumerate() {
            dst[(i * m + a) * width..][..width].copy_from_slice(run);
        }
    }
}

impl PackedActs {
    /// Quantizes the `m` rows of `x` (`cols` values each) as `kind`'s kernels take them,
    /// through `buf`, and refills from them, with the block-major copies if `block_major`
    /// (only the tile kernel reads them). Many rows are shared out over `pool`: each thread
    /// quantizes its rows and unpacks their blocks.
    pub(crate) fn quantize_fill(
        &mut self,
        pool: &ThreadPool,
        kind: PackedKind,
        x: &[f32],
        (m, cols): (usize, usize),
        block_major: bool,
        buf: &mut Vec<u8>,
    ) {
        let act = kind.act();
        let quantize = crate::quant::act::kernels().quantize[act as usize];
        let (a_row, nb) = (act.row_bytes(cols), cols / kind.block_elems());
        let block_bytes = a_row / nb.max(1);
        assert!(
            x.len() == m * cols && a_row == nb * block_bytes,
            "packed acts: x must be m × cols of whole blocks"
        );
        if buf.len() < m * a_row {
            buf.resize(m * a_row, 0);
        }
        self.rows = m;
        self.resize_rows(kind, m * nb);
        let blocks = SharedMut::new(&mut buf[..m * a_row]);
        let out = RowsOut::new(self);
        let rows = |range: std::ops::Range<usize>| {
            for j in range {
                // SAFETY: each thread takes a disjoint range of rows (below), and row j owns
                // bytes j·a_row..(j + 1)·a_row of the blocks and blocks j·nb..(j + 1)·nb of
                // the arrays.
                unsafe {
                    let dst = blocks.slice_mut(j * a_row, a_row);
                    quantize(&x[j * cols..(j + 1) * cols], dst);
                    for (i, raw) in dst.chunks_exact(block_bytes).enumerate() {
                        out.block(kind, j * nb + i, raw);
                    }
                }
            }
        };
        if m < PARALLEL_QUANT_ROWS * pool.n_threads() {
            rows(0..m);
        } else {
            pool.broadcast(&|t, n| rows(m * t / n..m * (t + 1) / n));
        }
        if block_major {
            self.fill_block_major(kind, m, nb);
        } else {
            self.q_bm.resize(0);
            self.d_bm.clear();
            self.s_bm.clear();
            self.sub_sums_bm.clear();
        }
    }

    /// The block-major copies of `q`, `d` and `s`.
    fn fill_block_major(&mut self, kind: PackedKind, m: usize, nb: usize) {
        let elems = kind.block_elems();
        // Q8_K: room for 16 rows of a last quarter from any row on (see `q_bm`).
        let pad = if elems == 256 {
            BLOCK_MAJOR_PAD * 64
        } else {
            0
        };
        self.q_bm.resize(m * nb * elems + pad);
        let part = elems.min(64);
        for (a, row) in self.q.chunks_exact(nb * elems).enumerate() {
            for (i, block) in row.chunks_exact(elems).enumerate() {
                for (k, quarter) in block.chunks_exact(part).enumerate() {
                    self.q_bm[i * m * elems + (k * m + a) * part..][..part]
                        .copy_from_slice(quarter);
                }
            }
        }
        block_major(&self.d, m, nb, 1, &mut self.d_bm);
        if kind.act() == ActFormat::Q8_1 {
            block_major(&self.s, m, nb, 1, &mut self.s_bm);
        }
        if kind.act() == ActFormat::Q8K {
            block_major(&self.sub_sums, m, nb, 8, &mut self.sub_sums_bm);
        }
    }

    /// Sizes the row-major arrays for `n` blocks of `kind`'s activation format.
    fn resize_rows(&mut self, kind: PackedKind, n: usize) {
        if kind.act() == ActFormat::Q8K {
            let q6 = usize::from(kind == PackedKind::Q6_K);
            self.q.resize(n * 256);
            self.qu.resize(q6 * n * 256);
            self.d.resize(n, 0.0);
            self.sub_sums.resize(n * 8, 0);
            self.bsums.resize(n * 16, 0);
            self.offset_sums.resize(q6 * n * 16, 0);
        } else {
            self.q.resize(n * 32);
            self.qu.resize(0);
            self.d.resize(n, 0.0);
            self.corr.resize(n, 0);
            self.s.resize(n, 0.0);
        }
    }
}

/// The row-major arrays of a [`PackedActs`], for threads that unpack disjoint blocks.
struct RowsOut<'a> {
    q: SharedMut<'a, i8>,
    qu: SharedMut<'a, i8>,
    d: SharedMut<'a, f32>,
    corr: SharedMut<'a, i32>,
    s: SharedMut<'a, f32>,
    sub_sums: SharedMut<'a, i16>,
    bsums: SharedMut<'a, i16>,
    offset_sums: SharedMut<'a, i32>,
}

impl<'a> RowsOut<'a> {
    fn new(a: &'a mut PackedActs) -> RowsOut<'a> {
        RowsOut {
            q: SharedMut::new(&mut a.q),
            qu: SharedMut::new(&mut a.qu),
            d: SharedMut::new(&mut a.d),
            corr: SharedMut::new(&mut a.corr),
            s: SharedMut::new(&mut a.s),
            sub_sums: SharedMut::new(&mut a.sub_sums),
            bsums: SharedMut::new(&mut a.bsums),
            offset_sums: SharedMut::new(&mut a.offset_sums),
        }
    }

    /// Unpacks block `k` (`raw`, one block of `kind`'s activation format) into the arrays.
    ///
    /// # Safety
    /// No other thread writes block `k` meanwhile.
    unsafe fn block(&self, kind: PackedKind, k: usize, raw: &[u8]) {
        // SAFETY: block k's entries of every array, exclusive by the caller's contract (the
        // bounds are checked).
        unsafe {
            match kind.act() {
                ActFormat::Q8K => {
                    let b: BlockQ8K = bytemuck::pod_read_unaligned(raw);
                    self.q.slice_mut(k * 256, 256).copy_from_slice(&b.qs);
                    self.d.write(k, b.d);
                    self.bsums.slice_mut(k * 16, 16).copy_from_slice(&b.bsums);
                    if kind == PackedKind::Q6_K {
                        self.q6_block(k, &b);
                    }
                    for (s, pair) in b.bsums.chunks_exact(2).enumerate() {
                        self.sub_sums.write(k * 8 + s, pair[0] + pair[1]);
                    }
                }
                ActFormat::Q8_1 => {
                    let b: BlockQ8_1 = bytemuck::pod_read_unaligned(raw);
                    self.set(k, b.d.to_f32(), &b.qs, 0);
                    self.s.write(k, b.s.to_f32());
                }
                _ => {
                    let b: BlockQ8_0 = bytemuck::pod_read_unaligned(raw);
                    let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
                    self.set(k, b.d.to_f32(), &b.qs, kind.offset() * sum);
                }
            }
        }
    }

    /// Block `k`'s entries of the arrays only the Q6_K kernels read.
    ///
    /// # Safety
    /// As [`RowsOut::block`].
    unsafe fn q6_block(&self, k: usize, b: &BlockQ8K) {
        // SAFETY: the caller's contract.
        unsafe {
            for (u, &q) in self.qu.slice_mut(k * 256, 256).iter_mut().zip(&b.qs) {
                *u = q ^ i8::MIN;
            }
            let offsets = self.offset_sums.slice_mut(k * 16, 16);
            for (o, &s) in offsets.iter_mut().zip(&b.bsums) {
                *o = -32 * s as i32;
            }
        }
    }

    /// # Safety
    /// As [`RowsOut::block`].
    unsafe fn set(&self, k: usize, d: f32, qs: &[i8; 32], corr: i32) {
        // SAFETY: the caller's contract.
        unsafe {
            self.q.slice_mut(k * 32, 32).copy_from_slice(qs);
            self.d.write(k, d);
            self.corr.write(k, corr);
        }
    }
}
