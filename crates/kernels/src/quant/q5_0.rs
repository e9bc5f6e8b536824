//! [`DType::Q5_0`]: blocks of 32 weights as 5-bit quants with one scale (22 bytes, 5.5 bits
//! per weight). Multiplied with [`ActFormat::Q8_0`] activations.
//!
//! ```text
//! BlockQ5_0 (22 bytes)
//! +--------+-------------+----------------------------------+
//! | d: f16 | qh: 4 bytes | qs[0] ...                 qs[15] |
//! +--------+-------------+----------------------------------+
//! qh (little-endian u32): bit j = bit 4 of element j's quant, j in 0..32
//! qs[j] = low 4 bits of element j | low 4 bits of element j + 16 << 4
//! x[j] = (q[j] - 16) * d,  q in 0..=31
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::format::quant_format;
use super::q4_0::signed_max;
use super::q8_0::{signed_dot_ref, BlockQ8_0};
use super::rows::{scalar_variant, QK};
#[cfg(target_arch = "x86_64")]
use super::x86::{offset, offset_tile, signed_rows};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One Q5_0 block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bits, little-endian: bit `j` belongs to element `j`.
    pub qh: [u8; 4],
    /// Low four bits: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(DType::Q5_0.block_bytes() == 22);

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q5_0`].
    Q5_0 { block: BlockQ5_0, act: BlockQ8_0, dtype: DType::Q5_0, act_format: ActFormat::Q8_0, quantize_act: super::act::quantize_q8_0_ref }
);

/// Reference quantization (llama.cpp's `quantize_row_q5_0_ref`): `d = max / -16` where `max`
/// is the value of largest magnitude, `q = min(31, trunc(x / d + 16.5))`. `x.len()` must be
/// a multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ5_0> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q5_0: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

fn quantize_block(x: &[f32]) -> BlockQ5_0 {
    let d = signed_max(x) / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |v: f32| ((v * id + 16.5) as i8).min(31) as u32;
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for (j, b) in qs.iter_mut().enumerate() {
        let (q0, q1) = (q(x[j]), q(x[j + QK / 2]));
        *b = (q0 & 0x0F | (q1 & 0x0F) << 4) as u8;
        qh |= (q0 >> 4) << j | (q1 >> 4) << (j + QK / 2);
    }
    BlockQ5_0 {
        d: f16::from_f32(d),
        qh: qh.to_le_bytes(),
        qs,
    }
}

/// Reference dequantization: `x = (q - 16) * d`.
pub fn dequantize_ref(blocks: &[BlockQ5_0], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "Q5_0 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let d = b.d.to_f32();
        for (j, q) in quants(b).into_iter().enumerate() {
            o[j] = (q - 16) as f32 * d;
        }
    }
}

/// The 32 quants (0..=31) of `b`, in element order.
fn quants(b: &BlockQ5_0) -> [i32; QK] {
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

/// Reference dot product: per block `sum((q - 16) * a_q) * (d * d_a)`, summed in `f32`.
pub fn vec_dot_ref(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    signed_dot_ref(w, a, |x| (x.d, quants(x).map(|q| q - 16)))
}

/// The fastest Q5_0 kernels that `isa` (capped to what this CPU runs) allows.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: scalar_variant::<Q5_0>(),
        avx2: {
            dequantize: signed_rows::dequantize_avx2::<Q5_0>,
            vec_dot: signed_rows::vec_dot_avx2::<Q5_0>,
            vec_dot_tile: offset_tile::vec_dot_tile_avx2::<Q5_0>,
        },
        avx512: {
            dequantize: signed_rows::dequantize_avx512::<Q5_0>,
            vec_dot: offset::vec_dot_avx512::<Q5_0, false>,
            vec_dot_tile: offset_tile::vec_dot_tile_avx512::<Q5_0>,
        },
    );
    v.kernels(DType::Q5_0, ActFormat::Q8_0)
}

/// Q5_0's unpacking for the shared offset-format kernels (offset 16): the nibbles, plus 16
/// where the fifth bit is set.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Q5_0;
    use crate::quant::x86::nibbles::{fifth_bits_avx2, nibbles2_avx512, nibbles_avx2};
    use crate::quant::x86::offset::OffsetBlocks;
    use crate::quant::x86::offset_tile::OffsetHalf;
    use crate::quant::x86::signed_rows::SignedBlocks;

    /// The block's `qh` word.
    ///
    /// # Safety
    /// A whole block is readable at `b`.
    #[inline]
    unsafe fn qh(b: *const u8) -> u32 {
        // SAFETY: the caller guarantees a whole block at `b`; qh is bytes 2..6.
        u32::from_le(unsafe { b.add(2).cast::<u32>().read_unaligned() })
    }

    impl SignedBlocks for Q5_0 {
        /// The quants minus 16 (`-16..=15`).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn quants_avx2(b: *const u8) -> __m256i {
            // SAFETY: the caller's guarantees are those of `unsigned_avx2`.
            let q = unsafe { Self::unsigned_avx2(b) };
            _mm256_sub_epi8(q, _mm256_set1_epi8(16))
        }

        /// The quants minus 16 with AVX-512 BW/VL: the fifth bits as a byte mask.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn quants_avx512(b: *const u8) -> __m256i {
            // SAFETY: the caller guarantees a whole block at `b`.
            let (low, qh) = unsafe { (nibbles_avx2(b.add(6)), qh(b)) };
            let q = _mm256_mask_add_epi8(low, qh, low, _mm256_set1_epi8(16));
            _mm256_sub_epi8(q, _mm256_set1_epi8(16))
        }
    }

    impl OffsetBlocks for Q5_0 {
        const OFFSET: i8 = 16;

        /// The nibbles, plus 16 where the 64-bit byte mask of fifth bits is set.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn unsigned2_avx512(b0: *const u8, b1: *const u8) -> __m512i {
            // SAFETY: the caller guarantees whole blocks at `b0` and `b1`.
            let (x, hi) = unsafe {
                (
                    nibbles2_avx512(b0.add(6), b1.add(6)),
                    qh(b0) as u64 | (qh(b1) as u64) << 32,
                )
            };
            _mm512_mask_add_epi8(x, hi, x, _mm512_set1_epi8(16))
        }
    }

    impl OffsetHalf for Q5_0 {
        /// The nibbles with the fifth bits ([`fifth_bits_avx2`]) ORed on.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn unsigned_avx2(b: *const u8) -> __m256i {
            // SAFETY: the caller guarantees a whole block at `b`.
            let (low, qh) = unsafe { (nibbles_avx2(b.add(6)), qh(b)) };
            _mm256_or_si256(low, fifth_bits_avx2(qh))
        }
    }
}
