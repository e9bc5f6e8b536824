//! Block scales of several rows gathered into one vector for the 4 x 4 tile kernels, and
//! the lane spreading that pairs them with the integer sums.
use std::arch::x86_64::*;

use crate::quant::TILE;

/// `out[j][r]`: weight row `r` times activation row `j`.
pub(crate) type Tile = [[f32; TILE]; TILE];

/// Scales of blocks `i`, `i+1` of 4 rows of `block`-byte blocks that start with an
/// `f16` scale, as `[d_r(i), d_r(i+1)]` at lanes `2r, 2r+1`.
///
/// # Safety
/// Blocks `i` and `i + 1` of every row are readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn pair_scales(rows: [*const u8; TILE], i: usize, block: usize) -> __m512 {
    // SAFETY: the caller guarantees blocks i and i+1 of every row are readable.
    let h = unsafe {
        rows.map(|p| {
            let b = p.add(i * block);
            let lo = b.cast::<u16>().read_unaligned() as i32;
            lo | (b.add(block).cast::<u16>().read_unaligned() as i32) << 16
        })
    };
    _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_setr_epi32(h[0], h[1], h[2], h[3])))
}

/// The activation scales of blocks `i`, `i+1` as `[d(i), d(i+1)]` repeated over 8
/// lanes (the layout of [`pair_scales`]), for `block`-byte blocks.
///
/// # Safety
/// Blocks `i` and `i + 1` of `a` are readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn act_pair_scales(a: *const u8, i: usize, block: usize) -> __m512 {
    // SAFETY: the caller guarantees blocks i and i+1 of `a` are readable.
    let h = unsafe {
        let b = a.add(i * block);
        let lo = b.cast::<u16>().read_unaligned() as i32;
        lo | (b.add(block).cast::<u16>().read_unaligned() as i32) << 16
    };
    let d = _mm_cvtph_ps(_mm_set1_epi32(h));
    _mm512_castps256_ps512(_mm256_set_m128(d, d))
}

/// Lanes `[k; 8] ++ [k + 1; 8]` of `v`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn spread(v: __m512, k: i32) -> __m512 {
    spread_pair(v, k, k + 1)
}

/// Lanes `[k; 8] ++ [l; 8]` of `v`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn spread_pair(v: __m512, k: i32, l: i32) -> __m512 {
    let idx = _mm512_setr_epi32(k, k, k, k, k, k, k, k, l, l, l, l, l, l, l, l);
    _mm512_permutexvar_ps(idx, v)
}
