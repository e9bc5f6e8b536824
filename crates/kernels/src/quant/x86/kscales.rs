//! Q4_K / Q5_K sub-block scales in vector form: the 6-bit scale/min unpacking, the
//! `pshufb` tables that broadcast one i16 scale per sub-block, and the mins correction.
//! Q6_K reuses the table builder.
use std::arch::x86_64::*;

use super::load::load128;

/// `pshufb` controls broadcasting i16 scale `j` (of 8) across a 256-bit vector.
pub(crate) static PICK256: [[u8; 32]; 8] = pick_tables::<32, 8>(32);
/// `pshufb` controls putting i16 scale `2m` in 128-bit lanes 0-1 and `2m + 1` in lanes 2-3.
pub(crate) static PICK512: [[u8; 64]; 4] = pick_tables::<64, 4>(32);

/// Table `t`, byte `i` selects bytes of i16 element `t * N / per + i / per` (`per` bytes
/// of the vector share one scale).
pub(crate) const fn pick_tables<const N: usize, const T: usize>(per: usize) -> [[u8; N]; T] {
    let mut out = [[0u8; N]; T];
    let mut t = 0;
    while t < T {
        let mut i = 0;
        while i < N {
            let elem = t * N / per + i / per;
            out[t][i] = (2 * elem + i % 2) as u8;
            i += 1;
        }
        t += 1;
    }
    out
}

/// The SIMD form of [`unpack_scales`](crate::quant::q4_k): `raw` holds the 12 scale bytes in its low 3 u32
/// lanes; returns (8 scales, 8 mins) as u16 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn scales_mins(raw: __m128i) -> (__m128i, __m128i) {
    let lo6 = _mm_and_si128(raw, _mm_set1_epi32(0x3f3f_3f3f)); // [sc 0..4, mn 0..4, ..]
                                                               // Bits 6-7 of each byte of w0 / w1 become bits 4-5 of sc / mn 4..8.
    let top = _mm_and_si128(_mm_srli_epi32::<2>(raw), _mm_set1_epi32(0x3030_3030));
    let w2 = _mm_srlv_epi32(_mm_shuffle_epi32::<0xAA>(raw), _mm_set_epi32(0, 0, 4, 0));
    let hi = _mm_or_si128(_mm_and_si128(w2, _mm_set1_epi32(0x0f0f_0f0f)), top); // [sc 4..8, mn 4..8, ..]
    let both = _mm_unpacklo_epi32(lo6, hi); // bytes: sc[0..8], mn[0..8]
    (
        _mm_cvtepu8_epi16(both),
        _mm_cvtepu8_epi16(_mm_unpackhi_epi64(both, both)),
    )
}

/// Scales and mins of a Q4_K / Q5_K block (both keep `scales` at byte offset 4).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn block_scales_mins<B: bytemuck::Pod>(b: &B) -> (__m128i, __m128i) {
    scales_mins(load128(bytemuck::bytes_of(b), 4))
}

/// `Σ_j mn[j] * (bsums[2j] + bsums[2j + 1])`, spread over 4 i32 lanes (`mn16`: u16 mins).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn mins_dot(mn16: __m128i, bsums: &[i16; 16]) -> __m128i {
    let pair = _mm_hadd_epi16(load128(bsums, 0), load128(bsums, 8));
    _mm_madd_epi16(pair, mn16)
}
