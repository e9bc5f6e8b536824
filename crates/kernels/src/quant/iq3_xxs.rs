//! IQ3_XXS: super-blocks of 256 weights, each group of 4 one row of a 4-wide grid of
//! magnitudes (`IQ3XXS_GRID`, values 4..=62), 7 sign bits per group of 8 and a 4-bit scale
//! per sub-block of 32 (3.06 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset  0: d    f16         super-scale
//! offset  2: qs   [u8; 64]    grid row of each group of 4 (qs[8j + k]: elements 32j + 4k ..)
//! offset 66: sas  [u8; 32]    per sub-block j, the u32 word w = sas[4j..4j+4]:
//!              bits 7l..7l+7 = sign index of elements 32j + 8l .. (KSIGNS gives 8 bits)
//!              bits 28..32   = ls, the sub-block scale
//! total 98 bytes
//!
//! x = d * (0.5 + ls) / 2 * grid * sign = (d * (2 ls + 1)) / 4 * grid * sign
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::grid_quant::{self, signed4, GridQuant};
use super::iq_grids::{IQ3XXS_GRID, KSIGNS};
use super::q8_k::{BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One IQ3_XXS super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq3Xxs {
    /// Super-scale.
    pub d: f16,
    /// Grid rows (64 bytes), then per sub-block a u32 of sign indices and scale (32 bytes).
    pub qs: [u8; 3 * QK_K / 8],
}

const _: () = assert!(std::mem::size_of::<BlockIq3Xxs>() == 98);
const _: () = assert!(std::mem::size_of::<BlockIq3Xxs>() == DType::IQ3_XXS.block_bytes());

/// The signs-and-scale word of sub-block `j`.
#[inline(always)]
pub(crate) fn word(b: &BlockIq3Xxs, j: usize) -> u32 {
    let at = QK_K / 4 + 4 * j;
    u32::from_le_bytes([b.qs[at], b.qs[at + 1], b.qs[at + 2], b.qs[at + 3]])
}

/// The [`GridQuant`] decoding of IQ3_XXS.
pub(crate) struct Iq3Xxs;

impl GridQuant for Iq3Xxs {
    type Block = BlockIq3Xxs;
    const DTYPE: DType = DType::IQ3_XXS;
    const FACTOR: f32 = 0.25;
    fn d(b: &BlockIq3Xxs) -> f32 {
        b.d.to_f32()
    }
    fn scales(b: &BlockIq3Xxs) -> [i32; 16] {
        std::array::from_fn(|g| 2 * (word(b, g / 2) >> 28) as i32 + 1)
    }
    fn quants(b: &BlockIq3Xxs) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for (j, sub) in q.chunks_exact_mut(32).enumerate() {
            let w = word(b, j);
            for (k, group) in sub.chunks_exact_mut(4).enumerate() {
                let signs = KSIGNS[(w >> (7 * (k / 2))) as usize & 0x7F] >> (4 * (k % 2));
                let row = IQ3XXS_GRID[b.qs[8 * j + k] as usize];
                group.copy_from_slice(&signed4(row, signs));
            }
        }
        q
    }
}

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockIq3Xxs], dst: &mut [f32]) {
    grid_quant::dequantize::<Iq3Xxs>(src, dst)
}

/// Dot product of an IQ3_XXS row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockIq3Xxs], a: &[BlockQ8K]) -> f32 {
    grid_quant::vec_dot::<Iq3Xxs>(w, a)
}

/// The fastest IQ3_XXS kernels `isa` can run (capped to what this CPU supports).
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: grid_quant::scalar_variant::<Iq3Xxs>(),
        avx2: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
        avx512: { kquant_vec_dot: x86::vec_dot_avx512, vec_dot_tile: x86::tile_avx2 },
    );
    v.kernels(DType::IQ3_XXS, ActFormat::Q8K)
}

/// x86 variants: the eight 4-byte grid rows of a sub-block gathered by their byte indices.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{word, BlockIq3Xxs, Iq3Xxs};
    use crate::quant::iq_grids::{IQ3XXS_GRID, KSIGNS};
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::iq::{bytes8, gather4};
    use crate::quant::x86::iq::{grid_dot_avx2, grid_dot_avx512, grid_tile_avx2, GridSimd};
    use crate::quant::TILE;

    impl GridSimd for Iq3Xxs {
        const TERNARY: bool = false;

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn rows_avx2(b: &BlockIq3Xxs, j: usize) -> __m256i {
            let idx = bytes8(std::array::from_fn(|k| b.qs[8 * j + k]));
            // SAFETY: byte indices are below 256, the grid's length.
            unsafe { gather4(&IQ3XXS_GRID, idx) }
        }

        #[inline(always)]
        fn signs(b: &BlockIq3Xxs, j: usize) -> u32 {
            let w = word(b, j);
            u32::from_le_bytes(std::array::from_fn(|l| {
                KSIGNS[(w >> (7 * l)) as usize & 0x7F]
            }))
        }

        #[inline(always)]
        fn scales2(b: &BlockIq3Xxs, j: usize) -> [i16; 2] {
            let s = 2 * (word(b, j) >> 28) as i16 + 1;
            [s, s]
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockIq3Xxs], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx2::<Iq3Xxs>(w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
        grid_tile_avx2::<Iq3Xxs>(n, w, a)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(w: &[BlockIq3Xxs], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx512::<Iq3Xxs>(w, a)
    }
}
