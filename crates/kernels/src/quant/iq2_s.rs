//! IQ2_S: super-blocks of 256 weights, each group of 8 one row of a 1024-row 8-wide grid of
//! magnitudes (`IQ2S_GRID`, values 8, 25, 43), an explicit sign bit per weight and a 4-bit
//! scale per group of 16 (2.56 bits per weight). Multiplied with [`ActFormat::Q8K`]
//! activations.
//!
//! ```text
//! offset  0: d      f16        super-scale
//! offset  2: qs     [u8; 64]   qs[m], m < 32: low 8 bits of the grid row of group m
//!                              qs[32 + m]: sign bits of group m (bit k: element 8m + k)
//! offset 66: qh     [u8; 8]    bits 2l..2l+2 of qh[j] = bits 8..10 of the row of group 4j + l
//! offset 74: scales [u8; 8]    nibble g % 2 of scales[g / 2] = ls, scale of elements 16g ..
//! total 82 bytes
//!
//! x = d * (0.5 + ls) / 4 * grid * sign = (d * (2 ls + 1)) / 8 * grid * sign
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::grid_quant::{self, signed8, GridQuant};
use super::iq_grids::IQ2S_GRID;
use super::q8_k::{BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One IQ2_S super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq2S {
    /// Super-scale.
    pub d: f16,
    /// Low 8 bits of the grid rows (32 bytes), then the sign bits (32 bytes).
    pub qs: [u8; QK_K / 4],
    /// Bits 8..10 of the grid rows.
    pub qh: [u8; QK_K / 32],
    /// 4-bit scales of the groups of 16.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIq2S>() == 82);
const _: () = assert!(std::mem::size_of::<BlockIq2S>() == DType::IQ2_S.block_bytes());

/// Grid row and sign bits of group `m` (0..32).
#[inline(always)]
pub(crate) fn group(b: &BlockIq2S, m: usize) -> (u64, u8) {
    let hi = (b.qh[m / 4] as usize >> (2 * (m % 4))) & 3;
    (IQ2S_GRID[b.qs[m] as usize | hi << 8], b.qs[QK_K / 8 + m])
}

/// The scale multiplier `2 ls + 1` of group of 16 `g`.
#[inline(always)]
pub(crate) fn scale(b: &BlockIq2S, g: usize) -> i32 {
    2 * ((b.scales[g / 2] >> (4 * (g % 2))) & 0xF) as i32 + 1
}

/// The [`GridQuant`] decoding of IQ2_S.
pub(crate) struct Iq2S;

impl GridQuant for Iq2S {
    type Block = BlockIq2S;
    const DTYPE: DType = DType::IQ2_S;
    const FACTOR: f32 = 0.125;
    fn d(b: &BlockIq2S) -> f32 {
        b.d.to_f32()
    }
    fn scales(b: &BlockIq2S) -> [i32; 16] {
        std::array::from_fn(|g| scale(b, g))
    }
    fn quants(b: &BlockIq2S) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for (m, out) in q.chunks_exact_mut(8).enumerate() {
            let (row, signs) = group(b, m);
            out.copy_from_slice(&signed8(row, signs));
        }
        q
    }
}

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockIq2S], dst: &mut [f32]) {
    grid_quant::dequantize::<Iq2S>(src, dst)
}

/// Dot product of an IQ2_S row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockIq2S], a: &[BlockQ8K]) -> f32 {
    grid_quant::vec_dot::<Iq2S>(w, a)
}

/// The fastest IQ2_S kernels `isa` can run (capped to what this CPU supports). AVX-512 CPUs
/// run the AVX2 kernel: with explicit sign bytes, the AVX-512 form measured slower.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: grid_quant::scalar_variant::<Iq2S>(),
        avx2: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
        avx512: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
    );
    v.kernels(DType::IQ2_S, ActFormat::Q8K)
}

/// x86 variants: the four grid rows of a sub-block gathered by their 10-bit indices.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{scale, BlockIq2S, Iq2S};
    use crate::quant::iq_grids::IQ2S_GRID;
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::iq::rows8;
    use crate::quant::x86::iq::{grid_dot_avx2, grid_tile_avx2, GridSimd};
    use crate::quant::TILE;

    impl GridSimd for Iq2S {
        const TERNARY: bool = false;

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn rows_avx2(b: &BlockIq2S, j: usize) -> __m256i {
            let h = b.qh[j] as usize;
            let idx = std::array::from_fn(|l| b.qs[4 * j + l] as usize | (h >> (2 * l) & 3) << 8);
            rows8(&IQ2S_GRID, idx)
        }

        #[inline(always)]
        fn signs(b: &BlockIq2S, j: usize) -> u32 {
            u32::from_le_bytes(std::array::from_fn(|l| b.qs[32 + 4 * j + l]))
        }

        #[inline(always)]
        fn scales2(b: &BlockIq2S, j: usize) -> [i16; 2] {
            [scale(b, 2 * j) as i16, scale(b, 2 * j + 1) as i16]
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockIq2S], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx2::<Iq2S>(w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
        grid_tile_avx2::<Iq2S>(n, w, a)
    }
}
