//! Horizontal reductions and scalar `f16` conversion.
use std::arch::x86_64::*;

/// Convert raw `f16` bits to `f32` (exact).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Horizontal sum of 8 lanes: the two halves added, then [`hsum128`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn hsum256(v: __m256) -> f32 {
    hsum128(_mm_add_ps(
        _mm256_castps256_ps128(v),
        _mm256_extractf128_ps::<1>(v),
    ))
}

/// Horizontal sum of 4 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn hsum128(v: __m128) -> f32 {
    let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}
