//! Helpers of the dot products with [`ActFormat::Q8_0`](crate::quant::ActFormat) style
//! activations: per-block scale products, signed byte products and weight prefetching.
//!
//! The signed x signed byte products use `|w| * sign(a, w)`; this is exact for every weight
//! byte and for activation bytes in `-127..=127`, which the activation quantizer guarantees
//! (`round(x / (amax / 127))` never reaches -128).
use std::arch::x86_64::*;

/// `d_w * d_a` of a weight block at `w` and an activation block at `a` (both start with
/// an `f16` scale), broadcast to 8 lanes.
///
/// # Safety
/// Both pointers address blocks that start with two readable scale bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scale_product(w: *const u8, a: *const u8) -> __m256 {
    // SAFETY: both pointers address blocks that start with two readable scale bytes.
    let (dw, da) = unsafe {
        (
            w.cast::<u16>().read_unaligned(),
            a.cast::<u16>().read_unaligned(),
        )
    };
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128((dw as u32 | (da as u32) << 16) as i32));
    _mm256_broadcastss_ps(_mm_mul_ss(v, _mm_movehdup_ps(v)))
}

/// `[d d_a, m s_a, d d_a, m s_a]` for the `(d, m)` blocks (Q4_1, Q5_1) with Q8_1 activations: both blocks
/// start with two `f16`s, `(d, m)` and `(d_a, s_a)`, converted together;
/// `[d, m, d_a, s_a] * [d_a, s_a, d, m] = [d d_a, m s_a, d d_a, m s_a]`.
///
/// # Safety
/// Four bytes are readable at `w` and at `a`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scale_min_products(w: *const u8, a: *const u8) -> __m128 {
    // SAFETY: the caller guarantees four readable bytes at both pointers.
    let (x, y) = unsafe {
        (
            w.cast::<u32>().read_unaligned(),
            a.cast::<u32>().read_unaligned(),
        )
    };
    let v = _mm_cvtph_ps(_mm_cvtsi64_si128((x as u64 | (y as u64) << 32) as i64));
    _mm_mul_ps(v, _mm_permute_ps::<0b01_00_11_10>(v))
}

/// `[d_w0 * d_a0; 8] ++ [d_w1 * d_a1; 8]` for two weight/activation block pairs.
///
/// # Safety
/// All four pointers address blocks that start with two readable scale bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn scale_products2(
    w0: *const u8,
    a0: *const u8,
    w1: *const u8,
    a1: *const u8,
) -> __m512 {
    // SAFETY: all four pointers address blocks that start with two readable scale bytes.
    let s = unsafe { [w0, a0, w1, a1].map(|p| p.cast::<u16>().read_unaligned() as u64) };
    let bits = s[0] | s[1] << 16 | s[2] << 32 | s[3] << 48;
    let v = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
    let p = _mm_mul_ps(v, _mm_movehdup_ps(v));
    let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p))
}

/// Per-lane sums of signed byte products `x * y` (8 x i32), AVX2 `maddubs` based.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn mul_sum_i8_avx2(x: __m256i, y: __m256i) -> __m256i {
    let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
}

/// Per-lane sums of signed byte products `x * y` (16 x i32), VNNI `vpdpbusd` based.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn mul_sum_i8_avx512(x: __m512i, y: __m512i) -> __m512i {
    let neg = _mm512_movepi8_mask(x);
    let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), sy)
}

/// How far ahead of the block being multiplied the m = 1 dot products prefetch weight
/// bytes. Decode streams every weight row once from memory; asking for lines this far
/// ahead keeps more misses in flight than the hardware prefetcher does on its own (the
/// distance runs past the row end into the next row, which is the next one read).
pub(crate) const PREFETCH_AHEAD: usize = 512;

/// Hints the CPU to bring the cache line at `p` into L1. Never faults, for any address.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch(p: *const u8) {
    // A prefetch is only a hint: it neither faults nor changes memory for any address,
    // which is why the intrinsic is safe.
    _mm_prefetch::<_MM_HINT_T0>(p.cast());
}
