//! Unaligned vector loads: bounds-checked ones from slices, and a pointer pair load.
use std::arch::x86_64::*;

/// Load 32 bytes from `b[at..at + 32]` (bounds-checked).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn load256<T: bytemuck::Pod>(b: &[T], at: usize) -> __m256i {
    let bytes: &[u8] = bytemuck::cast_slice(b);
    let s = &bytes[at * std::mem::size_of::<T>()..][..32];
    // SAFETY: `s` is exactly 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// Load 16 bytes from `b[at..at + 16]` (bounds-checked).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn load128<T: bytemuck::Pod>(b: &[T], at: usize) -> __m128i {
    let bytes: &[u8] = bytemuck::cast_slice(b);
    let s = &bytes[at * std::mem::size_of::<T>()..][..16];
    // SAFETY: `s` is exactly 16 readable bytes; the load is unaligned.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

/// Load 64 bytes from `b[at..at + 64]` (bounds-checked).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
pub(crate) fn load512<T: bytemuck::Pod>(b: &[T], at: usize) -> __m512i {
    let bytes: &[u8] = bytemuck::cast_slice(b);
    let s = &bytes[at * std::mem::size_of::<T>()..][..64];
    // SAFETY: `s` is exactly 64 readable bytes; the load is unaligned.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// Loads the 32 bytes starting at `p` and at `q` into one 512-bit register.
///
/// # Safety
/// 32 bytes are readable at `p` and at `q`; the CPU has the enabled features.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn load_2x256(p: *const u8, q: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 32 readable bytes at `p` and at `q`.
    unsafe {
        let lo = _mm256_loadu_si256(p.cast());
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), _mm256_loadu_si256(q.cast()))
    }
}
