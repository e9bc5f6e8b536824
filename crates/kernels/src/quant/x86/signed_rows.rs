//! Row kernels shared by the formats whose blocks are an `f16` scale `d` and 32 quants that
//! unpack to signed bytes `q` (`x = q d`): Q4_0 and Q5_0 (unsigned quants minus an offset)
//! and Q8_0, multiplied with Q8_0 activations. The format supplies an unpacking closure;
//! the cores are `#[inline]` and generic over it, so it inlines into the loop of each
//! format's entry point.
//!
//! The entry points are safe `#[target_feature]` functions of byte rows, generic over the
//! format's [`SignedBlocks`]; the raw-pointer cores they call address whole blocks (the
//! entry points check the row lengths); loads are unaligned.
use std::arch::x86_64::*;

use super::q8::{mul_sum_i8_avx2, scale_product};
use super::reduce::hsum256;
use super::tile::{from_halves, hsum_half, tile_rows};
use super::tile_scales::Tile;
use crate::quant::format::QuantFormat;
use crate::quant::rows::{check_dequantize, check_dot, dequantize_scalar, QK};
use crate::quant::TILE;

/// Bytes per Q8_0 activation block.
pub(crate) const A: usize = 34;

/// A format whose blocks are an `f16` scale `d` at byte 0 and 32 quants that unpack to
/// signed bytes `q` (`x = q d`), multiplied with Q8_0 activations.
pub(crate) trait SignedBlocks: QuantFormat {
    /// Bytes per weight block.
    const BLOCK: usize = std::mem::size_of::<Self::Block>();

    /// The 32 signed quants of the block at `b`, in element order.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; a whole block is readable at `b`.
    unsafe fn quants_avx2(b: *const u8) -> __m256i;

    /// [`SignedBlocks::quants_avx2`] where AVX-512 F/BW/VL/VNNI are available as well.
    ///
    /// # Safety
    /// The CPU has those features; a whole block is readable at `b`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn quants_avx512(b: *const u8) -> __m256i {
        // SAFETY: the caller's guarantees include those of `quants_avx2`.
        unsafe { Self::quants_avx2(b) }
    }
}

/// [`dot_avx2`] of format `F`: `nb` blocks at `w` with `nb` Q8_0 blocks at `a`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `w` holds `nb` blocks of `F` and `a` `nb` Q8_0 blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_of<F: SignedBlocks>(nb: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: the caller's guarantees; `quants_avx2` reads only within its block.
    unsafe { dot_avx2(nb, w, a, F::BLOCK, |b| F::quants_avx2(b)) }
}

/// The AVX2 `vec_dot` of format `F`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_avx2<F: SignedBlocks>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = check_dot(n, w, F::BLOCK, a, A);
    // SAFETY: the rows hold `nb` blocks (checked above); the features are enabled here.
    unsafe { dot_of::<F>(nb, w.as_ptr(), a.as_ptr()) }
}

/// The AVX2 4 x 4 tile of format `F`: two [`half_avx2`] calls.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_tile_avx2<F: SignedBlocks>(
    n: usize,
    w: [&[u8]; TILE],
    a: [&[u8]; TILE],
) -> Tile {
    let (nb, w, a) = tile_rows(n, w, F::BLOCK, a, A);
    // SAFETY: every row holds `nb` blocks (checked by `tile_rows`); the features are enabled
    // here; `quants_avx2` reads only within the block it is given.
    from_halves(a, |a| unsafe {
        half_avx2(nb, w, a, F::BLOCK, |b| F::quants_avx2(b))
    })
}

/// 4 weight rows x 2 activation rows (AVX2 has 16 registers), one block per step; each
/// weight block unpacked once for both activation rows. Signed products as
/// `|w| * sign(a, w)` (see [`super::q8`]). `quants(b)` returns the 32 signed quants of the
/// `block`-byte weight block at `b`, which starts with its `f16` scale.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; every weight row holds `nb` blocks of `block` bytes and
/// every activation row `nb` Q8_0 blocks; `quants` reads only within its block.
// Not inlined: each tile makes two calls, and one body keeps the 16 AVX2 registers.
#[inline(never)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_avx2<Q>(
    nb: usize,
    w: [*const u8; TILE],
    a: [*const u8; 2],
    block: usize,
    quants: Q,
) -> [[f32; TILE]; 2]
where
    Q: Fn(*const u8) -> __m256i,
{
    let mut acc = [[_mm256_setzero_ps(); TILE]; 2];
    let ones = _mm256_set1_epi16(1);
    for i in 0..nb {
        // SAFETY: block i < nb of every row is in bounds.
        let (wq, ws, aq, as_) = unsafe {
            let h = w.map(|p| p.add(i * block).cast::<u16>().read_unaligned() as i16);
            let g = a.map(|p| p.add(i * A).cast::<u16>().read_unaligned() as i16);
            (
                w.map(|p| quants(p.add(i * block))),
                _mm_cvtph_ps(_mm_setr_epi16(h[0], h[1], h[2], h[3], 0, 0, 0, 0)),
                a.map(|p| _mm256_loadu_si256(p.add(i * A + 2).cast())),
                _mm_cvtph_ps(_mm_setr_epi16(g[0], g[1], 0, 0, 0, 0, 0, 0)),
            )
        };
        let wabs = wq.map(|x| _mm256_sign_epi8(x, x));
        for j in 0..2 {
            let dd = _mm256_castps128_ps256(_mm_mul_ps(
                ws,
                _mm_permutevar_ps(as_, _mm_set1_epi32(j as i32)),
            ));
            for r in 0..TILE {
                let sy = _mm256_sign_epi8(aq[j], wq[r]);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs[r], sy), ones);
                let d = _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(r as i32));
                acc[j][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[j][r]);
            }
        }
    }
    hsum_half(acc)
}

/// The AVX2 `dequantize` of format `F`; a partial last block goes to the reference.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequantize_avx2<F: SignedBlocks>(src: &[u8], dst: &mut [f32]) {
    let nb = check_dequantize(src, dst, F::BLOCK, F::DTYPE.name());
    // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
    // features are enabled here; `quants_avx2` reads only within its block.
    unsafe {
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        dequantize_core_avx2(nb, s, d, F::BLOCK, |b| F::quants_avx2(b))
    };
    dequantize_scalar::<F>(&src[nb * F::BLOCK..], &mut dst[nb * QK..]);
}

/// The AVX-512 `dequantize` of format `F` (16 floats per store).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn dequantize_avx512<F: SignedBlocks>(src: &[u8], dst: &mut [f32]) {
    let nb = check_dequantize(src, dst, F::BLOCK, F::DTYPE.name());
    // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
    // features are enabled here; `quants_avx512` reads only within its block.
    unsafe {
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        dequantize_core_avx512(nb, s, d, F::BLOCK, |b| F::quants_avx512(b))
    };
    dequantize_scalar::<F>(&src[nb * F::BLOCK..], &mut dst[nb * QK..]);
}

/// Dot product of `nb` blocks of `block` bytes at `w` with `nb` Q8_0 blocks at `a`, one
/// block per step, two accumulators. `quants(b)` returns the 32 signed quants of the block
/// at `b`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `w` holds `nb` blocks of `block` bytes and `a` `nb` Q8_0
/// blocks; `quants` reads only within its block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_avx2<Q>(
    nb: usize,
    w: *const u8,
    a: *const u8,
    block: usize,
    quants: Q,
) -> f32
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

/// The block's `f16` scale at `b` as `f32` lane 0.
///
/// # Safety
/// Two bytes are readable at `b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale(b: *const u8) -> __m128 {
    // SAFETY: the caller guarantees two readable bytes at `b`.
    _mm_cvtph_ps(_mm_cvtsi32_si128(
        unsafe { b.cast::<u16>().read_unaligned() } as i32,
    ))
}

/// Dequantize `nb` blocks of `block` bytes at `src` into `32 nb` floats at `dst`: `q d`
/// with `quants(b)` the 32 signed quants of the block at `b`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `src` holds `nb` blocks and `dst` `32 nb` floats;
/// `quants` reads only within its block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequantize_core_avx2<Q>(nb: usize, src: *const u8, dst: *mut f32, block: usize, quants: Q)
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

/// [`dequantize_core_avx2`] with 16 floats per store.
///
/// # Safety
/// As for [`dequantize_core_avx2`], with AVX-512 F/BW/VL/VNNI as well.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dequantize_core_avx512<Q>(
    nb: usize,
    src: *const u8,
    dst: *mut f32,
    block: usize,
    quants: Q,
) where
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
