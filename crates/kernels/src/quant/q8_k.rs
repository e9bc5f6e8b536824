//! Q8_K: the activation format that every K-quant weight type (Q4_K, Q5_K, Q6_K) is
//! multiplied with.
//!
//! One block covers [`QK_K`] = 256 activations:
//!
//! ```text
//! offset  0: d      f32        scale: x[i] ≈ d * qs[i]
//! offset  4: qs     [i8; 256]  quants in [-127, 127]
//! offset 260: bsums [i16; 16]  bsums[g] = qs[16g] + ... + qs[16g + 15]
//! total 292 bytes
//! ```
//!
//! `bsums` lets a weight format with a per-sub-block offset (Q4_K/Q5_K mins, Q6_K's `-32`)
//! apply that offset with one multiply per 16 activations instead of one per activation.
//!
//! Quantization is symmetric: `d = max|x| / 127` and `qs[i] = round_ties_even(x[i] * 127 /
//! max|x|)`. Every variant ([`quantize_ref`] and the SIMD ones behind [`quantize_for`])
//! computes the same products and rounds the same way, so they agree bit for bit.

use bytemuck::{Pod, Zeroable};

use super::dispatch::{capped, Variant};
use super::format::QuantFormat;
use crate::cpu::Isa;

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// One Q8_K activation block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// Quants.
    pub qs: [i8; QK_K],
    /// Sums of each 16 consecutive quants.
    pub bsums: [i16; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

/// Quantize `src` (a multiple of [`QK_K`] elements) into Q8_K blocks: the scalar reference.
///
/// # Panics
/// If `src.len()` is not a multiple of [`QK_K`].
pub fn quantize_ref(src: &[f32]) -> Vec<BlockQ8K> {
    let mut out = vec![BlockQ8K::zeroed(); block_count(src.len())];
    for (x, blk) in src.chunks_exact(QK_K).zip(&mut out) {
        quantize_block_ref(x, blk);
    }
    out
}

/// Dequantize Q8_K blocks: `dst[i] = d * qs[i]`. `dst.len()` must be `QK_K * src.len()`.
pub fn dequantize_ref(src: &[BlockQ8K], dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len() * QK_K,
        "Q8_K dequantize: length mismatch"
    );
    for (blk, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        for (out, &q) in y.iter_mut().zip(&blk.qs) {
            *out = blk.d * q as f32;
        }
    }
}

/// The fastest byte-level Q8_K quantizer that `isa` can run (capped to what this CPU has).
///
/// The returned function converts `src` (a multiple of [`QK_K`] elements) into
/// `src.len() / 256 * 292` bytes at the start of `dst`, which must be 4-byte aligned.
/// NaN inputs give an unspecified (but memory-safe) block.
pub fn quantize_for(isa: Isa) -> super::act::QuantizeActFn {
    match capped(isa) {
        Isa::Scalar => quantize_bytes_ref,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => quantize_bytes_avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => quantize_bytes_avx512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => quantize_bytes_ref,
    }
}

/// Number of blocks in a row of `n` elements.
///
/// # Panics
/// If `n` is not a multiple of [`QK_K`].
pub(crate) fn block_count(n: usize) -> usize {
    assert!(
        n.is_multiple_of(QK_K),
        "K-quant row length {n} is not a multiple of {QK_K}"
    );
    n / QK_K
}

/// Quantize `src` (a multiple of 256 values) super-block by super-block with `block`.
///
/// # Panics
/// If `src.len()` is not a multiple of 256.
pub(crate) fn quantize_blocks<B>(src: &[f32], block: impl Fn(&[f32]) -> B) -> Vec<B> {
    block_count(src.len());
    src.chunks_exact(QK_K).map(block).collect()
}

/// View the first `n` elements' worth of a weight row as blocks.
///
/// # Panics
/// If `n` is not a multiple of [`QK_K`], `src` is too short or misaligned for `W`.
pub(crate) fn weight_blocks<W: Pod>(src: &[u8], n: usize) -> &[W] {
    bytemuck::cast_slice(&src[..block_count(n) * std::mem::size_of::<W>()])
}

/// The scalar variant of K-quant `F`: its reference kernels on byte rows.
pub(crate) fn kquant_scalar_variant<F: QuantFormat<Act = BlockQ8K>>() -> Variant {
    Variant::scalar(
        |src, dst| F::dequantize_ref(weight_blocks(src, dst.len()), dst),
        |n, w, a| {
            let (w, a) = split_row::<F::Block>(n, w, a);
            F::vec_dot_ref(w, a)
        },
    )
}

/// View a weight row of `n` elements and its Q8_K activation row as blocks.
///
/// # Panics
/// If `n` is not a multiple of [`QK_K`], a slice is too short, or a slice is misaligned for
/// its block type.
pub(crate) fn split_row<'a, W: Pod>(
    n: usize,
    w: &'a [u8],
    a: &'a [u8],
) -> (&'a [W], &'a [BlockQ8K]) {
    let nb = block_count(n);
    let wb = std::mem::size_of::<W>();
    let ab = std::mem::size_of::<BlockQ8K>();
    (
        bytemuck::cast_slice(&w[..nb * wb]),
        bytemuck::cast_slice(&a[..nb * ab]),
    )
}

fn blocks_mut<'a>(src: &[f32], dst: &'a mut [u8]) -> &'a mut [BlockQ8K] {
    let nb = block_count(src.len());
    bytemuck::cast_slice_mut(&mut dst[..nb * std::mem::size_of::<BlockQ8K>()])
}

/// `(d, 1/d)` for a block whose largest magnitude is `amax`, or `None` when the block must be
/// all zeros (zero, subnormal-tiny or NaN `amax`).
fn block_scale(amax: f32) -> Option<(f32, f32)> {
    let iscale = 127.0 / amax;
    (amax > 0.0 && iscale.is_finite()).then(|| (amax / 127.0, iscale))
}

/// Fill `bsums` from `qs`.
#[inline(always)]
fn fill_bsums(blk: &mut BlockQ8K) {
    for (s, g) in blk.bsums.iter_mut().zip(blk.qs.chunks_exact(16)) {
        *s = g.iter().map(|&q| q as i16).sum();
    }
}

fn quantize_block_ref(x: &[f32], blk: &mut BlockQ8K) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let Some((d, iscale)) = block_scale(amax) else {
        *blk = BlockQ8K::zeroed();
        return;
    };
    for (q, &v) in blk.qs.iter_mut().zip(x) {
        *q = (v * iscale).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    fill_bsums(blk);
    blk.d = d;
}

fn quantize_bytes_ref(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src.chunks_exact(QK_K).zip(blocks_mut(src, dst)) {
        quantize_block_ref(x, blk);
    }
}

#[cfg(target_arch = "x86_64")]
fn quantize_bytes_avx2(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src.chunks_exact(QK_K).zip(blocks_mut(src, dst)) {
        // SAFETY: `quantize_for` hands this function out only when `capped` confirmed the
        // CPU supports AVX2 + FMA + F16C; `x` has exactly QK_K elements (chunks_exact).
        unsafe { x86::quantize_block_avx2(x, blk) }
    }
}

#[cfg(target_arch = "x86_64")]
fn quantize_bytes_avx512(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src.chunks_exact(QK_K).zip(blocks_mut(src, dst)) {
        // SAFETY: handed out only when `capped` confirmed AVX-512 F/BW/VL/VNNI support;
        // `x` has exactly QK_K elements (chunks_exact).
        unsafe { x86::quantize_block_avx512(x, blk) }
    }
}

/// The Q8_K SIMD quantizers.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use super::{block_scale, fill_bsums, BlockQ8K, QK_K};

    /// Q8_K-quantize one block of `QK_K` values with AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn quantize_block_avx2(x: &[f32], blk: &mut BlockQ8K) {
        let x = &x[..QK_K];
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut m = _mm256_setzero_ps();
        for c in x.chunks_exact(8) {
            // SAFETY: `c` holds exactly 8 f32; the load is unaligned.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            m = _mm256_max_ps(m, _mm256_and_ps(v, abs_mask));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
        let Some((d, iscale)) = block_scale(amax) else {
            *blk = bytemuck::Zeroable::zeroed();
            return;
        };
        let is = _mm256_set1_ps(iscale);
        for (g, c) in x.chunks_exact(16).enumerate() {
            // SAFETY: `c` holds exactly 16 f32; both loads are unaligned.
            let (lo, hi) = unsafe {
                (
                    _mm256_loadu_ps(c.as_ptr()),
                    _mm256_loadu_ps(c[8..].as_ptr()),
                )
            };
            let i0 = _mm256_cvtps_epi32(_mm256_mul_ps(lo, is));
            let i1 = _mm256_cvtps_epi32(_mm256_mul_ps(hi, is));
            // packs interleaves 128-bit lanes: [i0.lo, i1.lo, i0.hi, i1.hi] -> reorder.
            let w = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(i0, i1));
            let b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
            let dst = &mut blk.qs[16 * g..16 * g + 16];
            // SAFETY: `dst` is exactly 16 writable bytes; the store is unaligned.
            unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), b) };
        }
        fill_bsums(blk);
        blk.d = d;
    }

    /// Q8_K-quantize one block of `QK_K` values with AVX-512.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn quantize_block_avx512(x: &[f32], blk: &mut BlockQ8K) {
        let x = &x[..QK_K];
        let mut m = _mm512_setzero_ps();
        for c in x.chunks_exact(16) {
            // SAFETY: `c` holds exactly 16 f32; the load is unaligned.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr()) };
            m = _mm512_max_ps(m, _mm512_abs_ps(v));
        }
        let Some((d, iscale)) = block_scale(_mm512_reduce_max_ps(m)) else {
            *blk = bytemuck::Zeroable::zeroed();
            return;
        };
        let is = _mm512_set1_ps(iscale);
        for (g, c) in x.chunks_exact(16).enumerate() {
            // SAFETY: `c` holds exactly 16 f32; the load is unaligned.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr()) };
            let b = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v, is)));
            let dst = &mut blk.qs[16 * g..16 * g + 16];
            // SAFETY: `dst` is exactly 16 writable bytes; the store is unaligned.
            unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), b) };
        }
        fill_bsums(blk);
        blk.d = d;
    }
}
