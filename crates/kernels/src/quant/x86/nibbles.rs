//! Unpacking of 16 bytes of packed 4-bit quants (element `j` in the low nibble of byte `j`,
//! element `j + 16` in the high nibble), as used by Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, INT4 and NF4;
//! and the fifth bits of Q5_0 / Q5_1.
use std::arch::x86_64::*;

/// The 32 quants packed in the 16 bytes at `qs`, as bytes 0..=15 in element order:
/// `[qs & 0x0F | qs >> 4 & 0x0F]`.
///
/// # Safety
/// 16 bytes are readable at `qs`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn nibbles_avx2(qs: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes at `qs`.
    let q = unsafe { _mm_loadu_si128(qs.cast()) };
    let both = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(q), _mm_srli_epi16::<4>(q));
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Two blocks' quants (16 packed bytes at `qs0` and at `qs1`) as 64 bytes 0..=15:
/// `[qs0 & 0x0F | qs0 >> 4 | qs1 & 0x0F | qs1 >> 4]`, i.e. elements 0..32 of each block.
/// Built from two 16-byte broadcasts and one variable shift per 64-bit lane.
///
/// # Safety
/// 16 bytes are readable at `qs0` and at `qs1`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn nibbles2_avx512(qs0: *const u8, qs1: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 16 readable bytes at `qs0` and at `qs1`.
    let (q0, q1) = unsafe {
        let q0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs0.cast()));
        (q0, _mm256_broadcastsi128_si256(_mm_loadu_si128(qs1.cast())))
    };
    let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q0), q1);
    let shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    _mm512_and_si512(_mm512_srlv_epi64(q, shift), _mm512_set1_epi8(0x0F))
}

/// 16 in byte `k` where bit `k` of `qh` is set, else 0: the fifth quant bits of Q5_0 and
/// Q5_1 as bytes to OR onto the nibbles. AVX2 has no bit-to-byte mask expansion: byte `k`
/// takes qh byte `k / 8` (`pshufb`), sets every bit but `k % 8`, and compares with all-ones.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn fifth_bits_avx2(qh: u32) -> __m256i {
    let spread = _mm256_set_epi64x(
        0x0303030303030303,
        0x0202020202020202,
        0x0101010101010101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), spread);
    let bits = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_and_si256(
        _mm256_cmpeq_epi8(bits, _mm256_set1_epi8(-1)),
        _mm256_set1_epi8(16),
    )
}
