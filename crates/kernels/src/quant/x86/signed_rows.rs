//! Row kernels shared by the formats whose blocks are an `f16` scale `d` and 32 quants that
//! unpack to signed bytes `q` (`x = q d`): Q4_0 and Q5_0 (unsigned quants minus an offset)
//! and Q8_0, multiplied with Q8_0 activations. The format supplies an unpacking closure;
//! the cores are `#[inline]` and generic over it, so it inlines into the loop of each
//! format's entry point.
//!
//! Pointers address whole blocks (the entry points check the row lengths); loads are
//! unaligned.
use std::arch::x86_64::*;

use super::load::load_2x256;
use super::q8::{mul_sum_i8_avx2, prefetch, scale_product, scale_products2, PREFETCH_AHEAD};
use super::reduce::hsum256;

/// Bytes per Q8_0 activation block.
const A: usize = 34;
/// Elements per block.
const QK: usize = 32;

/// Dot product of `nb` blocks of `block` bytes at `w` with `nb` Q8_0 blocks at `a`, one
/// block per step, two accumulators. `quants(b)` returns the 32 signed quants of the block
/// at `b`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `w` holds `nb` blocks of `block` bytes and `a` `nb` Q8_0
/// blocks; `quants` reads only within its block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_avx2<Q>(nb: usize, w: *const u8, a: *const u8, block: usize, quants: Q) -> f32
where
    Q: Fn(*const u8) -> __m256i,
{
    let mut acc = [_mm256_setzero_ps(); 2];
    for i in 0..nb {
        // SAFETY: block i < nb of both rows is in bounds.
        let (x, y, d) = unsafe {
            let (wb, ab) = (w.add(i * block), a.add(i * A));
            (
                quants(wb),
                _mm256_loadu_si256(ab.add(2).cast()),
                scale_product(wb, ab),
            )
        };
        let p = _mm256_cvtepi32_ps(mul_sum_i8_avx2(x, y));
        acc[i & 1] = _mm256_fmadd_ps(p, d, acc[i & 1]);
    }
    hsum256(_mm256_add_ps(acc[0], acc[1]))
}

/// The offset formats' AVX-512 dot product, two blocks per step: `sum(q * a) - sum(o * a)`,
/// both with `vpdpbusd`. `unpack(b0, b1)` returns the unsigned quants of the blocks at `b0`
/// and `b1` (elements 0..32 of each); `tail(i)` the dot product of block `i` alone (an odd
/// last block). With `PREFETCH`, weight bytes [`PREFETCH_AHEAD`] ahead are prefetched.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `w` holds `nb` blocks of `block`
/// bytes and `a` `nb` Q8_0 blocks; `unpack` reads only within its blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn offset_dot_avx512<const PREFETCH: bool, U, T>(
    (nb, w, a): (usize, *const u8, *const u8),
    (block, offset): (usize, i8),
    unpack: U,
    tail: T,
) -> f32
where
    U: Fn(*const u8, *const u8) -> __m512i,
    T: Fn(usize) -> f32,
{
    let o = _mm512_set1_epi8(offset);
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut i = 0;
    while i + 2 <= nb {
        if PREFETCH {
            prefetch(w.wrapping_add(i * block + PREFETCH_AHEAD));
        }
        // SAFETY: blocks i and i+1 < nb of both rows are in bounds.
        let (x, y, d) = unsafe {
            let (w0, a0) = (w.add(i * block), a.add(i * A));
            let (w1, a1) = (w0.add(block), a0.add(A));
            (
                unpack(w0, w1),
                load_2x256(a0.add(2), a1.add(2)),
                scale_products2(w0, a0, w1, a1),
            )
        };
        let zero = _mm512_setzero_si512();
        let p = _mm512_sub_epi32(
            _mm512_dpbusd_epi32(zero, x, y),
            _mm512_dpbusd_epi32(zero, o, y),
        );
        let k = (i >> 1) & 1;
        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[k]);
        i += 2;
    }
    let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
    if i < nb {
        sum += tail(i);
    }
    sum
}

/// The block's `f16` scale at `b` as `f32` lane 0.
///
/// # Safety
/// Two bytes are readable at `b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale(b: *const u8) -> __m128 {
    // SAFETY: the caller guarantees two readable bytes at `b`.
    _mm_cvtph_ps(_mm_cvtsi32_si128(unsafe { b.cast::<u16>().read_unaligned() } as i32))
}

/// Dequantize `nb` blocks of `block` bytes at `src` into `32 nb` floats at `dst`: `q d`
/// with `quants(b)` the 32 signed quants of the block at `b`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `src` holds `nb` blocks and `dst` `32 nb` floats;
/// `quants` reads only within its block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dequantize_avx2<Q>(nb: usize, src: *const u8, dst: *mut f32, block: usize, quants: Q)
where
    Q: Fn(*const u8) -> __m256i,
{
    for i in 0..nb {
        // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
        unsafe {
            let b = src.add(i * block);
            let d = _mm256_broadcastss_ps(scale(b));
            let q = quants(b);
            let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
            for (h, half) in halves.into_iter().enumerate() {
                for (k, part) in [half, _mm_unpackhi_epi64(half, half)]
                    .into_iter()
                    .enumerate()
                {
                    let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
                    _mm256_storeu_ps(dst.add(i * QK + 16 * h + 8 * k), _mm256_mul_ps(f, d));
                }
            }
        }
    }
}

/// [`dequantize_avx2`] with 16 floats per store.
///
/// # Safety
/// As for [`dequantize_avx2`], with AVX-512 F/BW/VL/VNNI as well.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn dequantize_avx512<Q>(nb: usize, src: *const u8, dst: *mut f32, block: usize, quants: Q)
where
    Q: Fn(*const u8) -> __m256i,
{
    for i in 0..nb {
        // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
        unsafe {
            let b = src.add(i * block);
            let d = _mm512_broadcastss_ps(scale(b));
            let q = quants(b);
            let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
            for (h, half) in halves.into_iter().enumerate() {
                let f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(half));
                _mm512_storeu_ps(dst.add(i * QK + 16 * h), _mm512_mul_ps(f, d));
            }
        }
    }
}
