//! The dot products of the grid i-quants ([`GridQuant`]) with Q8_K activations.
//!
//! A format hands over each sub-block of 32 weights as four 8-byte grid rows of magnitudes
//! (unsigned), one sign byte per row (bit `k`: element `k` negative) and the integer scales
//! of its two groups of 16 ([`GridSimd::sub_block`]). The signs are applied to the
//! activations, which stay in `-127..=127`, so `maddubs(magnitude, ±a)` is exact (pairs sum
//! to at most `2 * 63 * 127`); the scales multiply the 16-bit pair sums into 32-bit lanes.
use std::arch::x86_64::*;

use super::load::{load256, load512};
use super::reduce::hsum256;
use crate::quant::grid_quant::GridQuant;
use crate::quant::q8_k::BlockQ8K;

/// A grid i-quant's sub-blocks, in the form the SIMD kernels take.
pub(crate) trait GridSimd: GridQuant {
    /// Sub-block `j` (0..8) of `b`: its four grid rows (magnitudes, byte `k` = element `k`
    /// of the row), their sign bytes, and the scale multipliers of its two groups of 16.
    fn sub_block(b: &Self::Block, j: usize) -> ([u64; 4], [u8; 4], [i16; 2]);
}

/// `±1` bytes for every sign byte: byte `k` of entry `s` is `-1` if bit `k` of `s` is set.
static SIGN_BYTES: [u64; 256] = sign_bytes();

const fn sign_bytes() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut s = 0;
    while s < 256 {
        let mut k = 0;
        while k < 8 {
            let byte: u64 = if (s >> k) & 1 == 1 { 0xFF } else { 0x01 };
            t[s] |= byte << (8 * k);
            k += 1;
        }
        s += 1;
    }
    t
}

/// Four u64 lanes, lane `l` = `v[l]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes(v: [u64; 4]) -> __m256i {
    _mm256_setr_epi64x(v[0] as i64, v[1] as i64, v[2] as i64, v[3] as i64)
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
            let (rows, signs, s) = F::sub_block(wb, j);
            let mag = lanes(rows);
            let sg = lanes(signs.map(|b| SIGN_BYTES[b as usize]));
            let y = _mm256_sign_epi8(load256(&ab.qs, 32 * j), sg);
            let p = _mm256_maddubs_epi16(mag, y);
            let sc = _mm256_setr_m128i(_mm_set1_epi16(s[0]), _mm_set1_epi16(s[1]));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc));
        }
        let d = F::d(wb) * ab.d * F::FACTOR;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
    }
    hsum256(acc)
}

/// The AVX-512 VNNI dot product: two sub-blocks (64 weights) per register, the signs as a
/// negation mask on the activations, the scales applied by `vpdpwssd`.
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
            let (r0, s0, c0) = F::sub_block(wb, 2 * jj);
            let (r1, s1, c1) = F::sub_block(wb, 2 * jj + 1);
            let mag = _mm512_setr_epi64(
                r0[0] as i64,
                r0[1] as i64,
                r0[2] as i64,
                r0[3] as i64,
                r1[0] as i64,
                r1[1] as i64,
                r1[2] as i64,
                r1[3] as i64,
            );
            let mask = u64::from_le_bytes([s0[0], s0[1], s0[2], s0[3], s1[0], s1[1], s1[2], s1[3]]);
            let y = load512(&ab.qs, 64 * jj);
            let y = _mm512_mask_sub_epi8(y, mask, zero, y);
            let p = _mm512_maddubs_epi16(mag, y);
            isum = _mm512_dpwssd_epi32(isum, p, scale_pairs(c0, c1));
        }
        let d = F::d(wb) * ab.d * F::FACTOR;
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum), acc);
    }
    _mm512_reduce_add_ps(acc)
}

/// A ternary grid i-quant (IQ1_S, IQ1_M): quants `8 g + shift`, `g` in `{-1, 0, 1}` from the
/// grid and `shift = ±1` per row, in the form the SIMD kernels take.
pub(crate) trait TernarySimd: GridQuant {
    /// Sub-block `j` (0..8) of `b`: its four grid rows (signed bytes `g`), the shift of each
    /// row, and the scale multipliers of its two groups of 16.
    fn sub_block(b: &Self::Block, j: usize) -> ([u64; 4], [i8; 4], [i16; 2]);
}

/// The eight bytes of a row all equal to `s`.
#[inline(always)]
fn splat8(s: i8) -> u64 {
    s as u8 as u64 * 0x0101_0101_0101_0101
}

/// The quants `8 g + shift` of a sub-block: `g << 3` per byte (the bits a 16-bit shift
/// moves across bytes are masked off), plus the shifts.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn ternary_quants_avx2(rows: [u64; 4], shifts: [i8; 4]) -> __m256i {
    let g8 = _mm256_and_si256(
        _mm256_slli_epi16::<3>(lanes(rows)),
        _mm256_set1_epi8(0xF8u8 as i8),
    );
    _mm256_add_epi8(g8, lanes(shifts.map(splat8)))
}

/// The AVX2 dot product of a ternary format's row with a Q8_K row of as many blocks:
/// `|q| * sign(a, q)` by `maddubs` (exact: `|q| <= 9`), the scales by `madd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn ternary_dot_avx2<F: TernarySimd>(w: &[F::Block], a: &[BlockQ8K]) -> f32 {
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
            let (rows, shifts, s) = F::sub_block(wb, j);
            let q = ternary_quants_avx2(rows, shifts);
            let y = _mm256_sign_epi8(load256(&ab.qs, 32 * j), q);
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(q), y);
            let sc = _mm256_setr_m128i(_mm_set1_epi16(s[0]), _mm_set1_epi16(s[1]));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc));
        }
        let d = F::d(wb) * ab.d * F::FACTOR;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
    }
    hsum256(acc)
}

/// The AVX-512 VNNI dot product of a ternary format: two sub-blocks per register, the
/// activations negated where `q < 0`, the scales applied by `vpdpwssd`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn ternary_dot_avx512<F: TernarySimd>(w: &[F::Block], a: &[BlockQ8K]) -> f32 {
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
            let (r0, h0, c0) = F::sub_block(wb, 2 * jj);
            let (r1, h1, c1) = F::sub_block(wb, 2 * jj + 1);
            let q = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(ternary_quants_avx2(r0, h0)),
                ternary_quants_avx2(r1, h1),
            );
            let y = load512(&ab.qs, 64 * jj);
            let y = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(q), zero, y);
            let p = _mm512_maddubs_epi16(_mm512_abs_epi8(q), y);
            isum = _mm512_dpwssd_epi32(isum, p, scale_pairs(c0, c1));
        }
        let d = F::d(wb) * ab.d * F::FACTOR;
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum), acc);
    }
    _mm512_reduce_add_ps(acc)
}

/// The 16-bit scales of two sub-blocks in the lanes of their `maddubs` pair sums: each
/// 128-bit lane (16 weights) holds one group's scale.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn scale_pairs(c0: [i16; 2], c1: [i16; 2]) -> __m512i {
    let (a0, a1) = (_mm_set1_epi16(c0[0]), _mm_set1_epi16(c0[1]));
    let (b0, b1) = (_mm_set1_epi16(c1[0]), _mm_set1_epi16(c1[1]));
    let lo = _mm256_setr_m128i(a0, a1);
    let hi = _mm256_setr_m128i(b0, b1);
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}
