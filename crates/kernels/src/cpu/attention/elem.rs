//! [`KvElem`]: how the attention kernel reads the values of one stored head row in place, one
//! type per [`KvDtype`] so the kernel is monomorphized per storage format. A row is
//! `OFFSET` header bytes (the q8 scale) then `head_dim` values of `SIZE` bytes; its real
//! values are `get(i) · scale(row)` (see [`KvDtype`] for the formats).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::kv_dtype::{KvDtype, Q8_SCALE_BYTES};

/// One storage format, read in place.
///
/// # Safety
/// `get`, `load8` and `load16` read `SIZE` bytes per value through raw pointers: callers
/// keep them in bounds; `load8`/`load16` also need AVX2+F16C / AVX-512F, as the caller's
/// target features.
pub(super) trait KvElem {
    /// The format this type reads.
    const DTYPE: KvDtype;
    /// Header bytes before the values.
    const OFFSET: usize;
    /// Bytes per value.
    const SIZE: usize;

    /// The factor every value of the row starting at `row` is multiplied by.
    unsafe fn scale(row: *const u8) -> f32;
    /// Value `i` (unscaled) of the values starting at `p`.
    unsafe fn get(p: *const u8, i: usize) -> f32;
    /// Eight consecutive values (unscaled) starting at `p`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const u8) -> __m256;
    /// Sixteen consecutive values (unscaled) starting at `p`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const u8) -> __m512;
}

/// `f32` rows.
pub(super) struct F32Row;
/// `f16` rows.
pub(super) struct F16Row;
/// `q8` rows.
pub(super) struct Q8Row;

impl KvElem for F32Row {
    const DTYPE: KvDtype = KvDtype::F32;
    const OFFSET: usize = 0;
    const SIZE: usize = 4;

    #[inline(always)]
    unsafe fn scale(_: *const u8) -> f32 {
        1.0
    }
    #[inline(always)]
    unsafe fn get(p: *const u8, i: usize) -> f32 {
        // SAFETY: the caller keeps value i in bounds; the read is unaligned.
        unsafe { p.add(4 * i).cast::<f32>().read_unaligned() }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: the caller's contract (32 bytes in bounds, AVX).
        unsafe { _mm256_loadu_ps(p.cast()) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const u8) -> __m512 {
        // SAFETY: the caller's contract (64 bytes in bounds, AVX-512F).
        unsafe { _mm512_loadu_ps(p.cast()) }
    }
}

impl KvElem for F16Row {
    const DTYPE: KvDtype = KvDtype::F16;
    const OFFSET: usize = 0;
    const SIZE: usize = 2;

    #[inline(always)]
    unsafe fn scale(_: *const u8) -> f32 {
        1.0
    }
    #[inline(always)]
    unsafe fn get(p: *const u8, i: usize) -> f32 {
        // SAFETY: the caller keeps value i in bounds; the read is unaligned.
        let bits = unsafe { p.add(2 * i).cast::<u16>().read_unaligned() };
        half::f16::from_bits(bits).to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: the caller's contract (16 bytes in bounds, F16C).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const u8) -> __m512 {
        // SAFETY: the caller's contract (32 bytes in bounds, AVX-512F).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
}

impl KvElem for Q8Row {
    const DTYPE: KvDtype = KvDtype::Q8;
    const OFFSET: usize = Q8_SCALE_BYTES;
    const SIZE: usize = 1;

    #[inline(always)]
    unsafe fn scale(row: *const u8) -> f32 {
        // SAFETY: the caller keeps the row's 4 header bytes in bounds; the read is unaligned.
        unsafe { row.cast::<f32>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn get(p: *const u8, i: usize) -> f32 {
        // SAFETY: the caller keeps value i in bounds.
        (unsafe { *p.add(i) } as i8) as f32
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: the caller's contract (8 bytes in bounds, AVX2).
        unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast()))) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const u8) -> __m512 {
        // SAFETY: the caller's contract (16 bytes in bounds, AVX-512F).
        unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast()))) }
    }
}
