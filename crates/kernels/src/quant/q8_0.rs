//! [`DType::Q8_0`]: blocks of 32 weights, one `f16` scale and 32 signed bytes (34 bytes).
//!
//! ```text
//! BlockQ8_0 (34 bytes)
//! +--------+---------------------------------+
//! | d: f16 | qs[0] qs[1] ...          qs[31] |   x[j] = qs[j] * d
//! +--------+---------------------------------+
//! ```
//!
//! The same block is the [`ActFormat::Q8_0`] activation format that Q4_0, Q5_0 and Q8_0
//! weights are multiplied with, so this file also holds the reference dot product those
//! formats share (`signed_dot_ref`); their x86 kernels share the cores in
//! `quant::x86` (`signed_rows`, `offset`, `offset_tile`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::{select_variant, Variant};
use super::format::quant_format;
use super::rows::scalar_variant;
pub use super::rows::QK;
#[cfg(target_arch = "x86_64")]
use super::x86::{offset, offset_tile, signed_rows};
use super::{ActFormat, DType, TypeKernels, VecDotRowsFn};
use crate::cpu::Isa;

/// One Q8_0 block (weights or activations).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quants: `x[j] = qs[j] * d`.
    pub qs: [i8; QK],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(DType::Q8_0.block_bytes() == 34 && ActFormat::Q8_0.block_bytes() == 34);

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q8_0`].
    Q8_0 { block: BlockQ8_0, act: BlockQ8_0, dtype: DType::Q8_0, act_format: ActFormat::Q8_0, quantize_act: super::act::quantize_q8_0_ref }
);

/// Reference quantization (llama.cpp's `quantize_row_q8_0_ref`): `d = amax / 127`,
/// `qs = round(x / d)` with ties away from zero. `x.len()` must be a multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ8_0> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q8_0: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

/// Quantizes one block of 32 values (the reference rounding).
pub(crate) fn quantize_block(x: &[f32]) -> BlockQ8_0 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    BlockQ8_0 {
        d: f16::from_f32(d),
        qs,
    }
}

/// Reference dequantization: `out[32*i + j] = qs[j] * d`.
pub fn dequantize_ref(blocks: &[BlockQ8_0], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "Q8_0 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let d = b.d.to_f32();
        for (q, y) in b.qs.iter().zip(o.iter_mut()) {
            *y = *q as f32 * d;
        }
    }
}

/// Reference dot product: per block the exact integer sum, scaled by `d_w * d_a`, summed in
/// `f32` in block order.
pub fn vec_dot_ref(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    signed_dot_ref(w, a, |x| (x.d, x.qs.map(i32::from)))
}

/// The reference dot product of a format whose weights are `q d` (Q4_0, Q5_0, Q8_0) with
/// Q8_0 activations: per block the exact integer sum of `q a_q`, scaled by `d d_a`, summed in
/// `f32` in block order. `block(x)` returns a weight block's scale and its 32 quants `q`.
pub(crate) fn signed_dot_ref<W, F>(w: &[W], a: &[BlockQ8_0], block: F) -> f32
where
    F: Fn(&W) -> (f16, [i32; QK]),
{
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (d, q) = block(x);
        let sumi: i32 = q.iter().zip(&y.qs).map(|(&q, &a)| q * a as i32).sum();
        sum += sumi as f32 * (d.to_f32() * y.d.to_f32());
    }
    sum
}

/// The fastest Q8_0 kernels that `isa` (capped to what this CPU runs) allows.
pub fn kernels(isa: Isa) -> TypeKernels {
    variant(isa).kernels(DType::Q8_0, ActFormat::Q8_0)
}

/// The m = 1 kernel `isa` allows: `[vec_dot(n, w[r], a); 4]` for 4 weight rows and one
/// activation row, each activation block loaded once for the 4 rows (AVX-512 VNNI only).
pub fn vec_dot_rows(isa: Isa) -> Option<VecDotRowsFn> {
    variant(isa).vec_dot_rows
}

fn variant(isa: Isa) -> Variant {
    select_variant!(isa,
        scalar: scalar_variant::<Q8_0>(),
        avx2: {
            dequantize: x86::dequantize_avx2,
            vec_dot: signed_rows::vec_dot_avx2::<Q8_0>,
            vec_dot_tile: signed_rows::vec_dot_tile_avx2::<Q8_0>,
        },
        avx512: {
            dequantize: x86::dequantize_avx512,
            vec_dot: x86::vec_dot_avx512,
            vec_dot_tile: offset_tile::vec_dot_tile_avx512::<Q8_0>,
            vec_dot_rows: offset::vec_dot_rows_avx512::<Q8_0>,
        },
    )
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    //! AVX2 and AVX-512 VNNI Q8_0 kernels: the [`SignedBlocks`] and [`OffsetBlocks`] views
    //! that the shared row, rows and AVX-512 tile kernels take, and the kernels of Q8_0's
    //! own. The entry points are safe `#[target_feature]` functions of byte rows; the
    //! raw-pointer cores they call address whole blocks (checked by the entry points);
    //! loads are unaligned. Signed byte products use `|w| * sign(a, w)` (see
    //! [`crate::quant::x86::q8`]).
    use std::arch::x86_64::*;

    use super::{Q8_0, QK};
    use crate::quant::rows::{check_dequantize, check_dot, dequantize_scalar};
    use crate::quant::x86::load::load_2x256;
    use crate::quant::x86::offset::OffsetBlocks;
    use crate::quant::x86::q8::{mul_sum_i8_avx512, prefetch, scale_products2, PREFETCH_AHEAD};
    use crate::quant::x86::signed_rows::{dot_of, SignedBlocks};

    const B: usize = 34;

    impl SignedBlocks for Q8_0 {
        /// The 32 quants as they are.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn quants_avx2(b: *const u8) -> __m256i {
            // SAFETY: the caller guarantees a whole block at `b`; the quants are bytes 2..34.
            unsafe { _mm256_loadu_si256(b.add(2).cast()) }
        }
    }

    /// `vpdpbusd` multiplies unsigned by signed bytes, so weights are biased to `w + 128`
    /// (`xor 0x80`) with offset 128: `sum((w + 128) a) - 128 sum(a) = sum(w a)`, exact in
    /// `i32`.
    impl OffsetBlocks for Q8_0 {
        const OFFSET: i8 = -128;

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn unsigned2_avx512(b0: *const u8, b1: *const u8) -> __m512i {
            // SAFETY: the caller guarantees whole blocks at `b0` and `b1`.
            let q = unsafe { load_2x256(b0.add(2), b1.add(2)) };
            _mm512_xor_si512(q, _mm512_set1_epi8(-128))
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, B);
        // SAFETY: both rows hold `nb` blocks (checked above); the features are enabled here.
        unsafe { dot_avx512(nb, w.as_ptr(), a.as_ptr()) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot_avx512(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 2 <= nb {
            prefetch(w.wrapping_add(i * B + PREFETCH_AHEAD));
            // SAFETY: blocks i and i+1 < nb of both rows are in bounds.
            let (x, y, d) = unsafe {
                let (w0, a0) = (w.add(i * B), a.add(i * B));
                let (w1, a1) = (w0.add(B), a0.add(B));
                let x = load_2x256(w0.add(2), w1.add(2));
                (
                    x,
                    load_2x256(a0.add(2), a1.add(2)),
                    scale_products2(w0, a0, w1, a1),
                )
            };
            let k = (i >> 1) & 1;
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mul_sum_i8_avx512(x, y)), d, acc[k]);
            i += 2;
        }
        let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
        if i < nb {
            // SAFETY: block i < nb is in bounds; the CPU has AVX2 (implied by the features).
            sum += unsafe { dot_of::<Q8_0>(1, w.add(i * B), a.add(i * B)) };
        }
        sum
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[u8], dst: &mut [f32]) {
        let nb = check_dequantize(src, dst, B, "Q8_0");
        // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
        // features are enabled here.
        unsafe { deq_avx2(nb, src.as_ptr(), dst.as_mut_ptr()) };
        dequantize_scalar::<Q8_0>(&src[nb * B..], &mut dst[nb * QK..]);
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_avx2(nb: usize, src: *const u8, dst: *mut f32) {
        for i in 0..nb {
            // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
            unsafe {
                let b = src.add(i * B);
                let d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(
                    b.cast::<u16>().read_unaligned() as i32,
                )));
                for k in 0..4 {
                    let q = _mm_loadl_epi64(b.add(2 + 8 * k).cast());
                    let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
                    _mm256_storeu_ps(dst.add(i * QK + 8 * k), v);
                }
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn dequantize_avx512(src: &[u8], dst: &mut [f32]) {
        let nb = check_dequantize(src, dst, B, "Q8_0");
        // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
        // features are enabled here.
        unsafe { deq_avx512(nb, src.as_ptr(), dst.as_mut_ptr()) };
        dequantize_scalar::<Q8_0>(&src[nb * B..], &mut dst[nb * QK..]);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn deq_avx512(nb: usize, src: *const u8, dst: *mut f32) {
        for i in 0..nb {
            // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
            unsafe {
                let b = src.add(i * B);
                let d = _mm_cvtph_ps(_mm_cvtsi32_si128(b.cast::<u16>().read_unaligned() as i32));
                let d = _mm512_broadcastss_ps(d);
                for k in 0..2 {
                    let q = _mm_loadu_si128(b.add(2 + 16 * k).cast());
                    let v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
                    _mm512_storeu_ps(dst.add(i * QK + 16 * k), v);
                }
            }
        }
    }
}
