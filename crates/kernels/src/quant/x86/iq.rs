//! The dot products of the grid i-quants ([`GridQuant`]) with Q8_K activations.
//!
//! A format hands over each sub-block of 32 weights as one vector of its 32 grid bytes,
//! gathered from the grid by the rows' indices ([`GridSimd::rows_avx2`]), the 32 sign bits
//! and the integer scales of its two groups of 16. Two kinds of grid bytes:
//!
//! * magnitudes (IQ2_*, IQ3_*, unsigned): the signs are applied to the activations, which
//!   stay in `-127..=127`, so `maddubs(magnitude, ±a)` is exact (pairs sum to at most
//!   `2 * 63 * 127`);
//! * ternary values `g` (IQ1_*, with no sign bits): the quants `8 g ± 1` are built in the
//!   register, then multiplied as `|q| * sign(a, q)` (`|q| <= 9`).
//!
//! The scales then multiply the 16-bit pair sums into 32-bit lanes (`madd`, or `vpdpwssd`).
use std::arch::x86_64::*;

use super::load::{load256, load512};
use super::reduce::hsum256;
use crate::quant::grid_quant::GridQuant;
use crate::quant::q8_k::{split_row, BlockQ8K};
use crate::quant::TILE;

/// A grid i-quant's sub-blocks, in the form the SIMD kernels take.
pub(crate) trait GridSimd: GridQuant {
    /// Whether the grid bytes are ternary values `g` (quants `8 g ± 1`, the sign bits give
    /// the `-` shifts) rather than magnitudes (the sign bits negate).
    const TERNARY: bool;

    /// The 32 grid bytes of sub-block `j` (0..8) of `b`, in element order.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C.
    unsafe fn rows_avx2(b: &Self::Block, j: usize) -> __m256i;

    /// Bit `k` set: element `k` of sub-block `j` is negated (magnitudes) or has the shift
    /// `-1` (ternary).
    fn signs(b: &Self::Block, j: usize) -> u32;

    /// The scale multipliers of the two groups of 16 of sub-block `j`.
    fn scales2(b: &Self::Block, j: usize) -> [i16; 2];
}

/// 8 indices gathered from a 4-byte-entry grid: 32 bytes.
///
/// # Safety
/// The CPU has AVX2; every lane of `idx` is an index into `grid`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gather4(grid: &[u32], idx: __m256i) -> __m256i {
    // SAFETY: the caller guarantees that every index is in bounds of `grid`.
    unsafe { _mm256_i32gather_epi32::<4>(grid.as_ptr().cast(), idx) }
}

/// Rows `idx` of an 8-byte-entry grid: 32 bytes. (Four scalar loads beat a 4-lane gather.)
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn rows8(grid: &[u64], idx: [usize; 4]) -> __m256i {
    let r = idx.map(|i| grid[i] as i64);
    _mm256_setr_epi64x(r[0], r[1], r[2], r[3])
}

/// The eight bytes `b` as eight u32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn bytes8(b: [u8; 8]) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(i64::from_le_bytes(b)))
}

/// The 32 bits of `bits` as bytes: `-1` where set, `+1` where clear.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sign_bytes(bits: u32) -> __m256i {
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let v = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(v, select), select);
    _mm256_or_si256(set, _mm256_set1_epi8(1))
}

/// Sub-block `j` of `b` as the unsigned operand of `maddubs` and the vector whose signs
/// the activation bytes take (`_mm256_sign_epi8(a, signs)` is the signed operand).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn weights<F: GridSimd>(b: &F::Block, j: usize) -> (__m256i, __m256i) {
    // SAFETY: this function's features are the ones `rows_avx2` needs.
    let g = unsafe { F::rows_avx2(b, j) };
    let s = sign_bytes(F::signs(b, j));
    if F::TERNARY {
        // 8 g per byte: a 16-bit shift, the bits it moves across bytes masked off.
        let g8 = _mm256_and_si256(_mm256_slli_epi16::<3>(g), _mm256_set1_epi8(-8));
        let q = _mm256_add_epi8(g8, s);
        (_mm256_abs_epi8(q), q)
    } else {
        (g, s)
    }
}

/// The scales of sub-block `j`'s two groups of 16, one per 128-bit lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales_avx2<F: GridSimd>(b: &F::Block, j: usize) -> __m256i {
    let s = F::scales2(b, j);
    _mm256_setr_m128i(_mm_set1_epi16(s[0]), _mm_set1_epi16(s[1]))
}

/// The AVX2 dot product of a row of format `F` with a Q8_K row of as many blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn grid_dot_avx2<F: GridSimd>(w: &[F::Block], a: &[BlockQ8K]) -> f32 {
    assert_eq!(
        w.len(),
        a.len(),
        "{} vec_dot: block count mismatch",
        F::DTYPE
    );
    let mut acc = _mm256_setzero_ps();
    for (wb, ab) in w.iter().zip(a) {
        let mut isum = _mm256_setzero_si256();
        for j in 0..8 {
            let (x, signs) = weights::<F>(wb, j);
            let y = _mm256_sign_epi8(load256(&ab.qs, 32 * j), signs);
            let p = _mm256_maddubs_epi16(x, y);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scales_avx2::<F>(wb, j)));
        }
        let d = F::d(wb) * ab.d * F::FACTOR;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
    }
    hsum256(acc)
}

/// The AVX2 tile (`out[j][r]` = row `r` of `w` with row `j` of `a`, `n` weights each): each
/// weight row's sub-blocks unpacked once for all [`TILE`] activation rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn grid_tile_avx2<F: GridSimd>(
    n: usize,
    w: [&[u8]; TILE],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE] {
    let acts: [&[BlockQ8K]; TILE] = a.map(|ar| split_row::<F::Block>(n, w[0], ar).1);
    let mut out = [[0f32; TILE]; TILE];
    for (r, wr) in w.iter().enumerate() {
        let col = dot_rows_avx2::<F>(split_row::<F::Block>(n, wr, a[0]).0, acts);
        for (o, v) in out.iter_mut().zip(col) {
            o[r] = v;
        }
    }
    out
}

/// One weight row against [`TILE`] activation rows of as many blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_rows_avx2<F: GridSimd>(w: &[F::Block], a: [&[BlockQ8K]; TILE]) -> [f32; TILE] {
    let mut acc = [_mm256_setzero_ps(); TILE];
    for (bi, wb) in w.iter().enumerate() {
        let mut isum = [_mm256_setzero_si256(); TILE];
        for j in 0..8 {
            let (x, signs) = weights::<F>(wb, j);
            let sc = scales_avx2::<F>(wb, j);
            for (s, ar) in isum.iter_mut().zip(a) {
                let y = _mm256_sign_epi8(load256(&ar[bi].qs, 32 * j), signs);
                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), sc));
            }
        }
        let dw = F::d(wb) * F::FACTOR;
        for ((c, s), ar) in acc.iter_mut().zip(isum).zip(a) {
            *c = _mm256_fmadd_ps(_mm256_set1_ps(dw * ar[bi].d), _mm256_cvtepi32_ps(s), *c);
        }
    }
    acc.map(|v| hsum256(v))
}

/// The AVX-512 VNNI dot product: two sub-blocks (64 weights) per register, the sign bits
/// used directly as a byte mask, the scales applied by `vpdpwssd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn grid_dot_avx512<F: GridSimd>(w: &[F::Block], a: &[BlockQ8K]) -> f32 {
    assert_eq!(
        w.len(),
        a.len(),
        "{} vec_dot: block count mismatch",
        F::DTYPE
    );
    let zero = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_ps();
    for (wb, ab) in w.iter().zip(a) {
        let mut isum = _mm512_setzero_si512();
        for jj in 0..4 {
            let (j0, j1) = (2 * jj, 2 * jj + 1);
            // SAFETY: this function's features include the ones `rows_avx2` needs.
            let g = unsafe { join(F::rows_avx2(wb, j0), F::rows_avx2(wb, j1)) };
            let mask = F::signs(wb, j0) as u64 | (F::signs(wb, j1) as u64) << 32;
            let y = load512(&ab.qs, 64 * jj);
            let (x, y) = if F::TERNARY {
                // q = 8 g + 1, or 8 g - 1 where the bit is set; then |q| * sign(a, q).
                let g8 = _mm512_and_si512(_mm512_slli_epi16::<3>(g), _mm512_set1_epi8(-8));
                let one = _mm512_set1_epi8(1);
                let q = _mm512_mask_blend_epi8(
                    mask,
                    _mm512_add_epi8(g8, one),
                    _mm512_sub_epi8(g8, one),
                );
                let neg = _mm512_movepi8_mask(q);
                (_mm512_abs_epi8(q), _mm512_mask_sub_epi8(y, neg, zero, y))
            } else {
                (g, _mm512_mask_sub_epi8(y, mask, zero, y))
            };
            let p = _mm512_maddubs_epi16(x, y);
            let sc = scale_pairs(F::scales2(wb, j0), F::scales2(wb, j1));
            isum = _mm512_dpwssd_epi32(isum, p, sc);
        }
        let d = F::d(wb) * ab.d * F::FACTOR;
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum), acc);
    }
    _mm512_reduce_add_ps(acc)
}

/// `lo` and `hi` as the two halves of one register.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The 16-bit scales of two sub-blocks in the lanes of their `maddubs` pair sums: each
/// 128-bit lane (16 weights) holds one group's scale.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn scale_pairs(c0: [i16; 2], c1: [i16; 2]) -> __m512i {
    let lo = _mm256_setr_m128i(_mm_set1_epi16(c0[0]), _mm_set1_epi16(c0[1]));
    let hi = _mm256_setr_m128i(_mm_set1_epi16(c1[0]), _mm_set1_epi16(c1[1]));
    join(lo, hi)
}
