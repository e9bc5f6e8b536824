//! The Q4_K / Q5_K dot product skeletons: per super-block the sub-block scales and mins, the
//! format's integer sums against the scales, the mins term against the activation `bsums`,
//! and `d_a d` applied once per super-block in `f32`. The format
//! supplies only the unpacking of its quants (a closure that inlines into the loop).
use std::arch::x86_64::*;

use super::kscales::{block_scales_mins, mins_dot, PICK256, PICK512};
use super::load::{load256, load512};
use super::reduce::{f16_to_f32, hsum128, hsum256};
use crate::quant::q8_k::BlockQ8K;
use crate::quant::scale_min::{check_blocks, ScaleMinBlock};

/// The per-super-block scales of the Q4_K / Q5_K dots, given the block's u16 mins `mn16`:
/// adds the mins term `d_a dmin Σ_j mn[j] (bsums[2j] + bsums[2j + 1])` (over 4 lanes) to
/// `acc_m` and returns `d_a d`, which scales the block's integer sum.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn super_scales<B>(wb: &B, ab: &BlockQ8K, mn16: __m128i, acc_m: &mut __m128) -> f32
where
    B: ScaleMinBlock,
{
    let h = wb.head();
    let dd = ab.d * f16_to_f32(h.d.to_bits());
    let dm = ab.d * f16_to_f32(h.dmin.to_bits());
    let mins = _mm_cvtepi32_ps(mins_dot(mn16, &ab.bsums));
    *acc_m = _mm_fmadd_ps(_mm_set1_ps(dm), mins, *acc_m);
    dd
}

/// `sc[2p] Σ lo a + sc[2p + 1] Σ hi a` over sub-blocks `2p` (quants `lo`) and `2p + 1`
/// (quants `hi`) of a super-block with activation quants `a`, as i32 lanes (`sc16`: the
/// u16 scales in both 128-bit lanes).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn pair_sum_avx2(
    sc16: __m256i,
    (lo, hi): (__m256i, __m256i),
    a: &[i8],
    p: usize,
) -> __m256i {
    let p0 = _mm256_maddubs_epi16(lo, load256(a, 64 * p));
    let p1 = _mm256_maddubs_epi16(hi, load256(a, 64 * p + 32));
    let s0 = _mm256_shuffle_epi8(sc16, load256(&PICK256[2 * p], 0));
    let s1 = _mm256_shuffle_epi8(sc16, load256(&PICK256[2 * p + 1], 0));
    _mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1))
}

/// [`pair_sum_avx2`] for AVX-512, sub-blocks `4k..4k + 4`: `v0` holds the quants of `4k`,
/// `4k + 1` and `v1` those of `4k + 2`, `4k + 3`; accumulated into `isum` with `vpdpwssd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
pub(crate) fn quad_sum_avx512(
    isum: __m512i,
    sc16: __m512i,
    (v0, v1): (__m512i, __m512i),
    a: &[i8],
    k: usize,
) -> __m512i {
    let s0 = _mm512_shuffle_epi8(sc16, load512(&PICK512[2 * k], 0));
    let s1 = _mm512_shuffle_epi8(sc16, load512(&PICK512[2 * k + 1], 0));
    let p0 = _mm512_maddubs_epi16(v0, load512(a, 128 * k));
    let p1 = _mm512_maddubs_epi16(v1, load512(a, 128 * k + 64));
    _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum, p0, s0), p1, s1)
}

/// The AVX2 dot of a scale/min K-quant row: `isum(wb, ab, sc16)` returns the super-block's
/// scaled integer sums (i32 lanes) given the scales in both 128-bit lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn dot_avx2<B, S>(w: &[B], a: &[BlockQ8K], name: &str, isum: S) -> f32
where
    B: ScaleMinBlock,
    S: Fn(&B, &BlockQ8K, __m256i) -> __m256i,
{
    check_blocks(w.len(), a.len(), name);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (wb, ab) in w.iter().zip(a) {
        let (sc16, mn16) = block_scales_mins(wb);
        let sums = isum(wb, ab, _mm256_broadcastsi128_si256(sc16));
        let dd = super_scales(wb, ab, mn16, &mut acc_m);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sums), acc);
    }
    hsum256(acc) - hsum128(acc_m)
}

/// [`dot_avx2`] for AVX-512: the scales are broadcast to all four 128-bit lanes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
pub(crate) fn dot_avx512<B, S>(w: &[B], a: &[BlockQ8K], name: &str, isum: S) -> f32
where
    B: ScaleMinBlock,
    S: Fn(&B, &BlockQ8K, __m512i) -> __m512i,
{
    check_blocks(w.len(), a.len(), name);
    let mut acc = _mm512_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (wb, ab) in w.iter().zip(a) {
        let (sc16, mn16) = block_scales_mins(wb);
        let sums = isum(wb, ab, _mm512_broadcast_i32x4(sc16));
        let dd = super_scales(wb, ab, mn16, &mut acc_m);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(dd), _mm512_cvtepi32_ps(sums), acc);
    }
    _mm512_reduce_add_ps(acc) - hsum128(acc_m)
}
