//! IQ2_XXS: super-blocks of 256 weights, each group of 8 one row of an 8-wide grid of
//! magnitudes (`IQ2XXS_GRID`, values 8, 25, 43) with 7 sign bits, and a 4-bit scale per
//! sub-block of 32 (2.06 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset 0: d   f16          super-scale
//! offset 2: qs  [u16; 32]    per sub-block j, two u32 words (aux0, aux1) = qs[4j..4j+4]:
//!             byte l of aux0          = grid row of group l (elements 32j + 8l ..)
//!             bits 7l..7l+7 of aux1   = sign index of group l (KSIGNS gives 8 sign bits)
//!             bits 28..32 of aux1     = ls, the sub-block scale
//! total 66 bytes
//!
//! x = d * (0.5 + ls) / 4 * grid * sign = (d * (2 ls + 1)) / 8 * grid * sign
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::grid_quant::{self, signed8, GridQuant};
use super::iq_grids::{IQ2XXS_GRID, KSIGNS};
use super::q8_k::{BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One IQ2_XXS super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2Xxs {
    /// Super-scale.
    pub d: f16,
    /// Grid rows, sign indices and scales, two u32 words per sub-block of 32.
    pub qs: [u16; QK_K / 8],
}

const _: () = assert!(std::mem::size_of::<BlockIq2Xxs>() == 66);
const _: () = assert!(std::mem::size_of::<BlockIq2Xxs>() == DType::IQ2_XXS.block_bytes());

/// The two u32 words `(aux0, aux1)` of sub-block `j`.
#[inline(always)]
pub(crate) fn words(b: &BlockIq2Xxs, j: usize) -> (u32, u32) {
    let q = &b.qs[4 * j..4 * j + 4];
    (
        q[0] as u32 | (q[1] as u32) << 16,
        q[2] as u32 | (q[3] as u32) << 16,
    )
}

/// The [`GridQuant`] decoding of IQ2_XXS.
pub(crate) struct Iq2Xxs;

impl GridQuant for Iq2Xxs {
    type Block = BlockIq2Xxs;
    const DTYPE: DType = DType::IQ2_XXS;
    const FACTOR: f32 = 0.125;
    fn d(b: &BlockIq2Xxs) -> f32 {
        b.d.to_f32()
    }
    fn scales(b: &BlockIq2Xxs) -> [i32; 16] {
        std::array::from_fn(|g| 2 * (words(b, g / 2).1 >> 28) as i32 + 1)
    }
    fn quants(b: &BlockIq2Xxs) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for (j, sub) in q.chunks_exact_mut(32).enumerate() {
            let (aux0, aux1) = words(b, j);
            for (l, group) in sub.chunks_exact_mut(8).enumerate() {
                let row = IQ2XXS_GRID[(aux0 >> (8 * l)) as usize & 0xFF];
                let signs = KSIGNS[(aux1 >> (7 * l)) as usize & 0x7F];
                group.copy_from_slice(&signed8(row, signs));
            }
        }
        q
    }
}

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockIq2Xxs], dst: &mut [f32]) {
    grid_quant::dequantize::<Iq2Xxs>(src, dst)
}

/// Dot product of an IQ2_XXS row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockIq2Xxs], a: &[BlockQ8K]) -> f32 {
    grid_quant::vec_dot::<Iq2Xxs>(w, a)
}

/// The fastest IQ2_XXS kernels `isa` can run (capped to what this CPU supports).
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: grid_quant::scalar_variant::<Iq2Xxs>(),
        avx2: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
        avx512: { kquant_vec_dot: x86::vec_dot_avx512, vec_dot_tile: x86::tile_avx2 },
    );
    v.kernels(DType::IQ2_XXS, ActFormat::Q8K)
}

/// x86 variants: the four grid rows of a sub-block gathered by their byte indices.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{words, BlockIq2Xxs, Iq2Xxs};
    use crate::quant::iq_grids::{IQ2XXS_GRID, KSIGNS};
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::iq::rows8;
    use crate::quant::x86::iq::{grid_dot_avx2, grid_dot_avx512, grid_tile_avx2, GridSimd};
    use crate::quant::TILE;

    impl GridSimd for Iq2Xxs {
        const TERNARY: bool = false;

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn rows_avx2(b: &BlockIq2Xxs, j: usize) -> __m256i {
            rows8(&IQ2XXS_GRID, words(b, j).0.to_le_bytes().map(usize::from))
        }

        #[inline(always)]
        fn signs(b: &BlockIq2Xxs, j: usize) -> u32 {
            let aux1 = words(b, j).1;
            u32::from_le_bytes(std::array::from_fn(|l| {
                KSIGNS[(aux1 >> (7 * l)) as usize & 0x7F]
            }))
        }

        #[inline(always)]
        fn scales2(b: &BlockIq2Xxs, j: usize) -> [i16; 2] {
            let s = 2 * (words(b, j).1 >> 28) as i16 + 1;
            [s, s]
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockIq2Xxs], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx2::<Iq2Xxs>(w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
        grid_tile_avx2::<Iq2Xxs>(n, w, a)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(w: &[BlockIq2Xxs], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx512::<Iq2Xxs>(w, a)
    }
}
