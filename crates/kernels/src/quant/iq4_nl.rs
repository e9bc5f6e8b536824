//! [`DType::IQ4_NL`]: blocks of 32 weights as 4-bit indices into a fixed non-linear
//! 16-entry codebook, with one scale (18 bytes, 4.5 bits per weight). Multiplied with
//! [`ActFormat::Q8_0`] activations.
//!
//! ```text
//! BlockIq4Nl (18 bytes)
//! +--------+----------------------------------+
//! | d: f16 | qs[0] ...                 qs[15] |
//! +--------+----------------------------------+
//! qs[j] = index of element j | index of element j + 16 << 4
//! x[j] = d * CODEBOOK[index j]
//! ```
//!
//! The codebook entries are small signed integers, so a block is a Q8_0-style block of
//! signed quants `CODEBOOK[i]` and scale `d`: the dot product with Q8_0 activations is
//! `d d_a sum_j CODEBOOK[i_j] a_j`, and the x86 kernels are the shared signed-row kernels
//! with a `pshufb` table lookup as the unpacking.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::format::quant_format;
use super::q8_0::{signed_dot_ref, BlockQ8_0};
use super::rows::{scalar_variant, QK};
#[cfg(target_arch = "x86_64")]
use super::x86::{offset, offset_tile, signed_rows};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// The 16 codebook values (shared with [`DType::IQ4_XS`]), ascending; denser near zero,
/// where most weights lie.
pub const CODEBOOK: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// One IQ4_NL block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockIq4Nl {
    /// Scale.
    pub d: f16,
    /// Codebook indices: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == 18);
const _: () = assert!(DType::IQ4_NL.block_bytes() == 18);

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::IQ4_NL`].
    Iq4Nl { block: BlockIq4Nl, act: BlockQ8_0, dtype: DType::IQ4_NL, act_format: ActFormat::Q8_0, quantize_act: super::act::quantize_q8_0_ref }
);

/// The codebook index nearest to `v` (in codebook units).
pub(crate) fn nearest_index(v: f32) -> u8 {
    let mut best = 0;
    for (i, &c) in CODEBOOK.iter().enumerate() {
        if (v - c as f32).abs() < (v - CODEBOOK[best] as f32).abs() {
            best = i;
        }
    }
    best as u8
}

/// The value of largest magnitude (keeping its sign); 0 for an all-zero slice.
pub(crate) fn signed_amax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

/// Reference quantization: `d = max / -127` where `max` is the value of largest magnitude
/// (it maps to the codebook's end, `-127`), then each element takes the index whose
/// codebook value is nearest to `x / d`. `x.len()` must be a multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockIq4Nl> {
    assert!(
        x.len().is_multiple_of(QK),
        "IQ4_NL: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

fn quantize_block(x: &[f32]) -> BlockIq4Nl {
    let d = f16::from_f32(signed_amax(x) / CODEBOOK[0] as f32);
    let id = if d.to_f32() != 0.0 {
        1.0 / d.to_f32()
    } else {
        0.0
    };
    let mut qs = [0u8; QK / 2];
    for (j, b) in qs.iter_mut().enumerate() {
        *b = nearest_index(x[j] * id) | nearest_index(x[j + QK / 2] * id) << 4;
    }
    BlockIq4Nl { d, qs }
}

/// The 32 signed quants `CODEBOOK[index]` of `b`, in element order.
fn quants(b: &BlockIq4Nl) -> [i32; QK] {
    std::array::from_fn(|j| {
        let i = if j < QK / 2 {
            b.qs[j] & 0x0F
        } else {
            b.qs[j - QK / 2] >> 4
        };
        CODEBOOK[i as usize] as i32
    })
}

/// Reference dequantization: `x = d * CODEBOOK[index]`.
pub fn dequantize_ref(blocks: &[BlockIq4Nl], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "IQ4_NL dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let d = b.d.to_f32();
        for (y, q) in o.iter_mut().zip(quants(b)) {
            *y = q as f32 * d;
        }
    }
}

/// Reference dot product: per block `sum(CODEBOOK[i] * a_q) * (d * d_a)`, summed in `f32`.
pub fn vec_dot_ref(w: &[BlockIq4Nl], a: &[BlockQ8_0]) -> f32 {
    signed_dot_ref(w, a, |x| (x.d, quants(x)))
}

/// The fastest IQ4_NL kernels that `isa` (capped to what this CPU runs) allows.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: scalar_variant::<Iq4Nl>(),
        avx2: {
            dequantize: signed_rows::dequantize_avx2::<Iq4Nl>,
            vec_dot: signed_rows::vec_dot_avx2::<Iq4Nl>,
            vec_dot_tile: signed_rows::vec_dot_tile_avx2::<Iq4Nl>,
        },
        avx512: {
            dequantize: signed_rows::dequantize_avx512::<Iq4Nl>,
            vec_dot: offset::vec_dot_avx512::<Iq4Nl, true>,
            vec_dot_tile: offset_tile::vec_dot_tile_avx512::<Iq4Nl>,
            vec_dot_rows: offset::vec_dot_rows_avx512::<Iq4Nl>,
        },
    );
    v.kernels(DType::IQ4_NL, ActFormat::Q8_0)
}

/// IQ4_NL's unpacking for the shared signed-row and offset kernels: the nibbles looked up in
/// the codebook with `pshufb`. For the AVX-512 offset kernels (`vpdpbusd` takes unsigned
/// bytes) the table is the codebook plus 128, with offset 128, as Q8_0's `w + 128`.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use super::{Iq4Nl, CODEBOOK};
    use crate::quant::x86::nibbles::{nibbles2_avx512, nibbles_avx2};
    use crate::quant::x86::offset::OffsetBlocks;
    use crate::quant::x86::signed_rows::SignedBlocks;

    /// `CODEBOOK[i] + 128` (1..=241) in every 128-bit lane, as a `pshufb` table.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn biased_codebook_avx512() -> __m512i {
        // SAFETY: CODEBOOK is exactly 16 readable bytes; the load is unaligned.
        let t = unsafe { _mm_loadu_si128(CODEBOOK.as_ptr().cast()) };
        _mm512_broadcast_i32x4(_mm_xor_si128(t, _mm_set1_epi8(-128)))
    }

    impl OffsetBlocks for Iq4Nl {
        const OFFSET: i8 = -128;

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn unsigned2_avx512(b0: *const u8, b1: *const u8) -> __m512i {
            // SAFETY: the caller guarantees whole blocks at `b0` and `b1`; qs is bytes 2..18.
            let idx = unsafe { nibbles2_avx512(b0.add(2), b1.add(2)) };
            _mm512_shuffle_epi8(biased_codebook_avx512(), idx)
        }
    }

    /// The codebook in both 128-bit lanes, as a `pshufb` table.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn codebook_avx2() -> __m256i {
        // SAFETY: CODEBOOK is exactly 16 readable bytes; the load is unaligned.
        let t = unsafe { _mm_loadu_si128(CODEBOOK.as_ptr().cast()) };
        _mm256_broadcastsi128_si256(t)
    }

    impl SignedBlocks for Iq4Nl {
        /// `CODEBOOK[index]` for the 32 indices, in element order.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn quants_avx2(b: *const u8) -> __m256i {
            // SAFETY: the caller guarantees a whole block at `b`; qs is bytes 2..18.
            let idx = unsafe { nibbles_avx2(b.add(2)) };
            _mm256_shuffle_epi8(codebook_avx2(), idx)
        }
    }
}
