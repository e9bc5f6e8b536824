//! A Q4_K panel's packed 6-bit scales and mins, unpacked for all 16 rows at once: the panel
//! stores byte `k` of every row's 12 GGUF scale bytes together (16 bytes, row `r` at byte
//! `r`), so the GGUF unpacking runs once on 16 lanes.

use std::arch::x86_64::*;

/// One super-block's scales, a row per byte lane.
pub(super) struct Q4KScales {
    /// `sc[s]`: the 6-bit scale of sub-block `s` of each row.
    pub sc: [__m128i; 8],
    /// `mn_pairs[t] = [rows 0..8, rows 8..16]`: the 6-bit mins of sub-blocks `2t` and `2t + 1`
    /// interleaved (byte `2r'` and `2r' + 1` for the half's row `r'`), ready to widen into
    /// `i16` pairs that multiply the activation's two sub-block sums.
    pub mn_pairs: [[__m128i; 2]; 4],
}

/// Unpacks the 192 scale bytes at `sp` (see `layout.rs`).
///
/// # Safety
/// 192 bytes at `sp` are readable; the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_scales(sp: *const u8) -> Q4KScales {
    // SAFETY: the caller's contract: 12 loads of 16 bytes within the 192.
    let b: [__m128i; 12] =
        std::array::from_fn(|k| unsafe { _mm_loadu_si128(sp.add(16 * k).cast()) });
    let (low6, low4, top) = (_mm_set1_epi8(63), _mm_set1_epi8(15), _mm_set1_epi8(0x30));
    // A byte's top two bits, moved to bits 4..6 (shifting 16-bit lanes moves the next byte's
    // bits into bits 6..8, which the mask drops).
    let top2 = |x: __m128i| _mm_and_si128(_mm_srli_epi16(x, 2), top);
    let mut sc = [_mm_setzero_si128(); 8];
    let mut mn = [_mm_setzero_si128(); 8];
    for s in 0..4 {
        sc[s] = _mm_and_si128(b[s], low6);
        mn[s] = _mm_and_si128(b[s + 4], low6);
        sc[s + 4] = _mm_or_si128(_mm_and_si128(b[s + 8], low4), top2(b[s]));
        let high = _mm_and_si128(_mm_srli_epi16(b[s + 8], 4), low4);
        mn[s + 4] = _mm_or_si128(high, top2(b[s + 4]));
    }
    let mn_pairs = std::array::from_fn(|t| {
        let (a, b) = (mn[2 * t], mn[2 * t + 1]);
        [_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b)]
    });
    Q4KScales { sc, mn_pairs }
}
