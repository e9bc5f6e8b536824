//! [`DType::Q4_0`]: blocks of 32 weights as 4-bit quants with one scale (18 bytes, 4.5 bits
//! per weight). Multiplied with [`ActFormat::Q8_0`] activations.
//!
//! ```text
//! BlockQ4_0 (18 bytes)
//! +--------+----------------------------------------------+
//! | d: f16 | qs[0] qs[1] ...                       qs[15] |
//! +--------+----------------------------------------------+
//! qs[j] = x[j] quant in the low nibble | x[j + 16] quant in the high nibble << 4
//! x[j] = (q[j] - 8) * d,  q in 0..=15
//! ```
//!
//! The x86 kernels are built on the offset-format cores shared with Q5_0
//! (`quant::x86::signed_rows`, `quant::x86::offset`, `quant::x86::offset_tile`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::{select_variant, Variant};
use super::format::quant_format;
use super::q8_0::{signed_dot_ref, BlockQ8_0};
use super::rows::{scalar_variant, QK};
#[cfg(target_arch = "x86_64")]
use super::x86::{offset, offset_tile, signed_rows};
use super::{ActFormat, DType, TypeKernels, VecDotRowsFn};
use crate::cpu::Isa;

/// One Q4_0 block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Packed quants: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(DType::Q4_0.block_bytes() == 18);

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q4_0`].
    Q4_0 { block: BlockQ4_0, act: BlockQ8_0, dtype: DType::Q4_0, act_format: ActFormat::Q8_0, quantize_act: super::act::quantize_q8_0_ref }
);

/// Reference quantization (llama.cpp's `quantize_row_q4_0_ref`): `d = max / -8` where `max`
/// is the value of largest magnitude, `q = min(15, trunc(x / d + 8.5))`. `x.len()` must be a
/// multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ4_0> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q4_0: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

/// The value of largest magnitude in `x` (the first one on ties), or 0.
pub(crate) fn signed_max(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn quantize_block(x: &[f32]) -> BlockQ4_0 {
    let d = signed_max(x) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    let mut qs = [0u8; QK / 2];
    for (j, b) in qs.iter_mut().enumerate() {
        *b = q(x[j]) | q(x[j + QK / 2]) << 4;
    }
    BlockQ4_0 {
        d: f16::from_f32(d),
        qs,
    }
}

/// Reference dequantization: `x = (q - 8) * d`.
pub fn dequantize_ref(blocks: &[BlockQ4_0], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "Q4_0 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let d = b.d.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            o[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            o[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// Reference dot product: per block `sum((q - 8) * a_q) * (d * d_a)`, summed in `f32`.
pub fn vec_dot_ref(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    signed_dot_ref(w, a, |x| {
        let q = |j: usize| match j {
            0..16 => x.qs[j] & 0x0F,
            _ => x.qs[j - QK / 2] >> 4,
        };
        (x.d, std::array::from_fn(|j| q(j) as i32 - 8))
    })
}

/// The fastest Q4_0 kernels that `isa` (capped to what this CPU runs) allows.
pub fn kernels(isa: Isa) -> TypeKernels {
    variant(isa).kernels(DType::Q4_0, ActFormat::Q8_0)
}

/// The m = 1 kernel `isa` allows: `[vec_dot(n, w[r], a); 4]` for 4 weight rows and one
/// activation row, each activation block loaded once for the 4 rows (AVX-512 VNNI only).
pub fn vec_dot_rows(isa: Isa) -> Option<VecDotRowsFn> {
    variant(isa).vec_dot_rows
}

fn variant(isa: Isa) -> Variant {
    select_variant!(isa,
        scalar: scalar_variant::<Q4_0>(),
        avx2: {
            dequantize: signed_rows::dequantize_avx2::<Q4_0>,
            vec_dot: signed_rows::vec_dot_avx2::<Q4_0>,
            vec_dot_tile: offset_tile::vec_dot_tile_avx2::<Q4_0>,
        },
        avx512: {
            dequantize: signed_rows::dequantize_avx512::<Q4_0>,
            vec_dot: offset::vec_dot_avx512::<Q4_0, true>,
            vec_dot_tile: offset_tile::vec_dot_tile_avx512::<Q4_0>,
            vec_dot_rows: offset::vec_dot_rows_avx512::<Q4_0>,
        },
    )
}

/// Q4_0's unpacking for the shared offset-format kernels: the nibbles, offset 8.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Q4_0;
    use crate::quant::x86::nibbles::{nibbles2_avx512, nibbles_avx2};
    use crate::quant::x86::offset::OffsetBlocks;
    use crate::quant::x86::offset_tile::OffsetHalf;
    use crate::quant::x86::signed_rows::SignedBlocks;

    impl SignedBlocks for Q4_0 {
        /// The nibbles minus 8.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn quants_avx2(b: *const u8) -> __m256i {
            // SAFETY: the caller's guarantees are those of `unsigned_avx2`.
            _mm256_sub_epi8(unsafe { Self::unsigned_avx2(b) }, _mm256_set1_epi8(8))
        }
    }

    impl OffsetBlocks for Q4_0 {
        const OFFSET: i8 = 8;

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn unsigned2_avx512(b0: *const u8, b1: *const u8) -> __m512i {
            // SAFETY: the caller guarantees whole blocks at `b0` and `b1`; the quants are
            // bytes 2..18.
            unsafe { nibbles2_avx512(b0.add(2), b1.add(2)) }
        }
    }

    impl OffsetHalf for Q4_0 {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn unsigned_avx2(b: *const u8) -> __m256i {
            // SAFETY: the caller guarantees a whole block at `b`; the quants are bytes 2..18.
            unsafe { nibbles_avx2(b.add(2)) }
        }
    }
}
