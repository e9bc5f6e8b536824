//! IQ2_XS: super-blocks of 256 weights, each group of 8 one row of a 512-row 8-wide grid of
//! magnitudes (`IQ2XS_GRID`, values 8, 25, 43) with 7 sign bits, and a 4-bit scale per
//! group of 16 (2.31 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset  0: d      f16         super-scale
//! offset  2: qs     [u16; 32]   per group of 8 (qs[m]: elements 8m ..):
//!              bits 0..9  = grid row, bits 9..16 = sign index (KSIGNS gives 8 bits)
//! offset 66: scales [u8; 8]     nibble g % 2 of scales[g / 2] = ls, scale of elements 16g ..
//! total 74 bytes
//!
//! x = d * (0.5 + ls) / 4 * grid * sign = (d * (2 ls + 1)) / 8 * grid * sign
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::grid_quant::{self, signed8, GridQuant};
use super::iq_grids::{IQ2XS_GRID, KSIGNS};
use super::q8_k::{BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One IQ2_XS super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2Xs {
    /// Super-scale.
    pub d: f16,
    /// Grid row (9 bits) and sign index (7 bits) of each group of 8.
    pub qs: [u16; QK_K / 8],
    /// 4-bit scales of the groups of 16.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIq2Xs>() == 74);
const _: () = assert!(std::mem::size_of::<BlockIq2Xs>() == DType::IQ2_XS.block_bytes());

/// Grid row and sign bits of group `m` (0..32).
#[inline(always)]
pub(crate) fn group(b: &BlockIq2Xs, m: usize) -> (u64, u8) {
    let q = b.qs[m];
    (IQ2XS_GRID[q as usize & 511], KSIGNS[q as usize >> 9])
}

/// The scale multiplier `2 ls + 1` of group of 16 `g`.
#[inline(always)]
pub(crate) fn scale(b: &BlockIq2Xs, g: usize) -> i32 {
    2 * ((b.scales[g / 2] >> (4 * (g % 2))) & 0xF) as i32 + 1
}

/// The [`GridQuant`] decoding of IQ2_XS.
pub(crate) struct Iq2Xs;

impl GridQuant for Iq2Xs {
    type Block = BlockIq2Xs;
    const DTYPE: DType = DType::IQ2_XS;
    const FACTOR: f32 = 0.125;
    fn d(b: &BlockIq2Xs) -> f32 {
        b.d.to_f32()
    }
    fn scales(b: &BlockIq2Xs) -> [i32; 16] {
        std::array::from_fn(|g| scale(b, g))
    }
    fn quants(b: &BlockIq2Xs) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for (m, out) in q.chunks_exact_mut(8).enumerate() {
            let (row, signs) = group(b, m);
            out.copy_from_slice(&signed8(row, signs));
        }
        q
    }
}

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockIq2Xs], dst: &mut [f32]) {
    grid_quant::dequantize::<Iq2Xs>(src, dst)
}

/// Dot product of an IQ2_XS row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockIq2Xs], a: &[BlockQ8K]) -> f32 {
    grid_quant::vec_dot::<Iq2Xs>(w, a)
}

/// The fastest IQ2_XS kernels `isa` can run (capped to what this CPU supports).
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: grid_quant::scalar_variant::<Iq2Xs>(),
        avx2: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
        avx512: { kquant_vec_dot: x86::vec_dot_avx512, vec_dot_tile: x86::tile_avx2 },
    );
    v.kernels(DType::IQ2_XS, ActFormat::Q8K)
}

/// x86 variants: the four grid rows of a sub-block gathered by their 9-bit indices.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{scale, BlockIq2Xs, Iq2Xs};
    use crate::quant::iq_grids::{IQ2XS_GRID, KSIGNS};
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::iq::rows8;
    use crate::quant::x86::iq::{grid_dot_avx2, grid_dot_avx512, grid_tile_avx2, GridSimd};
    use crate::quant::TILE;

    impl GridSimd for Iq2Xs {
        const TERNARY: bool = false;

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn rows_avx2(b: &BlockIq2Xs, j: usize) -> __m256i {
            rows8(
                &IQ2XS_GRID,
                std::array::from_fn(|l| b.qs[4 * j + l] as usize & 511),
            )
        }

        #[inline(always)]
        fn signs(b: &BlockIq2Xs, j: usize) -> u32 {
            u32::from_le_bytes(std::array::from_fn(|l| {
                KSIGNS[b.qs[4 * j + l] as usize >> 9]
            }))
        }

        #[inline(always)]
        fn scales2(b: &BlockIq2Xs, j: usize) -> [i16; 2] {
            [scale(b, 2 * j) as i16, scale(b, 2 * j + 1) as i16]
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockIq2Xs], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx2::<Iq2Xs>(w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
        grid_tile_avx2::<Iq2Xs>(n, w, a)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(w: &[BlockIq2Xs], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx512::<Iq2Xs>(w, a)
    }
}
