//! [`DType::Q5_1`]: blocks of 32 weights as 5-bit unsigned quants with a scale and a minimum
//! (24 bytes, 6 bits per weight). Multiplied with [`ActFormat::Q8_1`] activations.
//!
//! ```text
//! BlockQ5_1 (24 bytes)
//! +--------+--------+-------------+----------------------------------+
//! | d: f16 | m: f16 | qh: 4 bytes | qs[0] ...                 qs[15] |
//! +--------+--------+-------------+----------------------------------+
//! qh (little-endian u32): bit j = bit 4 of element j's quant, j in 0..32
//! qs[j] = low 4 bits of element j | low 4 bits of element j + 16 << 4
//! x[j] = q[j] * d + m,  q in 0..=31
//! ```
//!
//! The dot product with a Q8_1 block `(d_a, s_a, a_q)` is Q4_1's:
//! `d d_a sum_j q_j a_qj + m s_a`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::act::BlockQ8_1;
use super::dispatch::select_variant;
use super::format::quant_format;
use super::rows::{scalar_variant, QK};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One Q5_1 block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (offset).
    pub m: f16,
    /// Fifth bits, little-endian: bit `j` belongs to element `j`.
    pub qh: [u8; 4],
    /// Low four bits: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);
const _: () = assert!(DType::Q5_1.block_bytes() == 24);

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q5_1`].
    Q5_1 { block: BlockQ5_1, act: BlockQ8_1, dtype: DType::Q5_1, act_format: ActFormat::Q8_1, quantize_act: super::act::quantize_q8_1_ref }
);

/// Reference quantization: `d = (max - min) / 31`, `q = min(31, trunc((x - min) / d + 0.5))`.
/// `x.len()` must be a multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ5_1> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q5_1: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

fn quantize_block(x: &[f32]) -> BlockQ5_1 {
    let (min, max) = x
        .iter()
        .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |v: f32| (((v - min) * id + 0.5) as u32).min(31);
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for (j, b) in qs.iter_mut().enumerate() {
        let (q0, q1) = (q(x[j]), q(x[j + QK / 2]));
        *b = (q0 & 0x0F | (q1 & 0x0F) << 4) as u8;
        qh |= (q0 >> 4) << j | (q1 >> 4) << (j + QK / 2);
    }
    BlockQ5_1 {
        d: f16::from_f32(d),
        m: f16::from_f32(min),
        qh: qh.to_le_bytes(),
        qs,
    }
}

/// The 32 quants (0..=31) of `b`, in element order.
fn quants(b: &BlockQ5_1) -> [i32; QK] {
    let qh = u32::from_le_bytes(b.qh);
    std::array::from_fn(|j| {
        let low = if j < QK / 2 {
            b.qs[j] & 0x0F
        } else {
            b.qs[j - QK / 2] >> 4
        };
        low as i32 | ((qh >> j & 1) << 4) as i32
    })
}

/// Reference dequantization: `x = q * d + m` (a rounded multiply, then a rounded add).
pub fn dequantize_ref(blocks: &[BlockQ5_1], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "Q5_1 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (y, q) in o.iter_mut().zip(quants(b)) {
            *y = q as f32 * d + m;
        }
    }
}

/// Reference dot product: per block `(d * d_a) * sum(q * a_q) + m * s_a`, summed in `f32`.
pub fn vec_dot_ref(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 = quants(x)
            .iter()
            .zip(&y.qs)
            .map(|(&q, &a)| q * a as i32)
            .sum();
        sum += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sum
}

/// The fastest Q5_1 kernels that `isa` (capped to what this CPU runs) allows. AVX-512 CPUs
/// run the AVX2 kernels.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: scalar_variant::<Q5_1>(),
        avx2: { dequantize: x86::dequantize_avx2, vec_dot: x86::vec_dot_avx2 },
        avx512: { dequantize: x86::dequantize_avx2, vec_dot: x86::vec_dot_avx2 },
    );
    v.kernels(DType::Q5_1, ActFormat::Q8_1)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 Q5_1 x Q8_1 kernels: the Q4_1 scheme with the fifth bits ORed onto the nibbles.
    //! Pointers passed to the `unsafe fn`s address whole blocks (checked by the safe
    //! wrappers); loads are unaligned.
    use std::arch::x86_64::*;

    use super::QK;
    use crate::quant::rows::{check_dequantize, check_dot, dequantize_scalar};
    use crate::quant::x86::nibbles::{fifth_bits_avx2, nibbles_avx2};
    use crate::quant::x86::q8::scale_min_products;
    use crate::quant::x86::reduce::hsum256;

    /// Bytes per weight block and per Q8_1 activation block.
    const B: usize = 24;
    const A: usize = 36;

    /// The 32 unsigned quants (0..=31) of the block at `b`, in element order.
    ///
    /// # Safety
    /// A whole block is readable at `b`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(b: *const u8) -> __m256i {
        // SAFETY: the caller guarantees a whole block: qh is bytes 4..8, qs bytes 8..24.
        let (low, qh) = unsafe {
            (
                nibbles_avx2(b.add(8)),
                u32::from_le(b.add(4).cast::<u32>().read_unaligned()),
            )
        };
        _mm256_or_si256(low, fifth_bits_avx2(qh))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, A);
        // SAFETY: the rows hold `nb` blocks (checked above); the features are enabled here.
        unsafe { dot_avx2(nb, w.as_ptr(), a.as_ptr()) }
    }

    /// One accumulator for `d d_a sum(q a)` and one for `m s_a`, in block order.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_avx2(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = _mm_setzero_ps();
        for i in 0..nb {
            // SAFETY: block i < nb of both rows is in bounds.
            let (x, y, s) = unsafe {
                let (wb, ab) = (w.add(i * B), a.add(i * A));
                (
                    quants(wb),
                    _mm256_loadu_si256(ab.add(4).cast()),
                    scale_min_products(wb, ab),
                )
            };
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
            let d = _mm256_broadcastss_ps(s);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc);
            acc_m = _mm_add_ps(acc_m, s);
        }
        let m = _mm_cvtss_f32(_mm_movehdup_ps(acc_m));
        hsum256(acc) + m
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[u8], dst: &mut [f32]) {
        let nb = check_dequantize(src, dst, B, "Q5_1");
        // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
        // features are enabled here.
        unsafe { deq_avx2(nb, src.as_ptr(), dst.as_mut_ptr()) };
        dequantize_scalar::<super::Q5_1>(&src[nb * B..], &mut dst[nb * QK..]);
    }

    /// `q * d + m` as a multiply then an add (no FMA), bit-identical to the reference.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_avx2(nb: usize, src: *const u8, dst: *mut f32) {
        for i in 0..nb {
            // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
            unsafe {
                let b = src.add(i * B);
                let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(b.cast::<i32>().read_unaligned()));
                let d = _mm256_broadcastss_ps(dm);
                let m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
                let q = quants(b);
                let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                for (h, half) in halves.into_iter().enumerate() {
                    for (k, part) in [half, _mm_unpackhi_epi64(half, half)]
                        .into_iter()
                        .enumerate()
                    {
                        let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part));
                        let v = _mm256_add_ps(_mm256_mul_ps(f, d), m);
                        _mm256_storeu_ps(dst.add(i * QK + 16 * h + 8 * k), v);
                    }
                }
            }
        }
    }
}
