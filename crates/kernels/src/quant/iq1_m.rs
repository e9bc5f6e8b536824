//! IQ1_M: super-blocks of 256 weights, each group of 8 one row of the IQ1_S ternary grid
//! shifted by `±1/8` (a shift sign per group), with a 3-bit scale per group of 16 and the
//! `f16` super-scale split across the scale words (1.75 bits per weight). Multiplied with
//! [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset  0: qs     [u8; 32]   low 8 bits of the grid row of group m (elements 8m ..)
//! offset 32: qh     [u8; 16]   nibble m % 2 of qh[m / 2]: bits 0..3 = bits 8..11 of the
//!                              row of group m, bit 3 = sign of its shift (set: -1/8)
//! offset 48: scales [u16; 4]   bits 3t..3t+3 (t < 4) of scales[g / 4] = s of group of 16 g
//!                              (t = g % 4); the top nibbles, scales[0] lowest, are d's bits
//! total 56 bytes
//!
//! x = d * (2 s + 1) * (grid ± 1/8) = (d * (2 s + 1)) / 8 * (8 grid ± 1)
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::grid_quant::{self, GridQuant};
use super::iq1_s::shifted8;
use super::iq_grids::IQ1S_GRID;
use super::q8_k::{BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One IQ1_M super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq1M {
    /// Low 8 bits of the grid rows.
    pub qs: [u8; QK_K / 8],
    /// High grid bits and shift sign of each group of 8.
    pub qh: [u8; QK_K / 16],
    /// 3-bit scales of the groups of 16; their top nibbles hold the super-scale.
    pub scales: [u16; QK_K / 64],
}

const _: () = assert!(std::mem::size_of::<BlockIq1M>() == 56);
const _: () = assert!(std::mem::size_of::<BlockIq1M>() == DType::IQ1_M.block_bytes());

/// The super-scale, gathered from the top nibbles of the scale words.
#[inline(always)]
pub(crate) fn super_scale(b: &BlockIq1M) -> f16 {
    let s = &b.scales;
    f16::from_bits(s[0] >> 12 | (s[1] >> 8) & 0xF0 | (s[2] >> 4) & 0xF00 | s[3] & 0xF000)
}

/// The [`GridQuant`] decoding of IQ1_M.
pub(crate) struct Iq1M;

impl GridQuant for Iq1M {
    type Block = BlockIq1M;
    const DTYPE: DType = DType::IQ1_M;
    const FACTOR: f32 = 0.125;
    fn d(b: &BlockIq1M) -> f32 {
        super_scale(b).to_f32()
    }
    fn scales(b: &BlockIq1M) -> [i32; 16] {
        std::array::from_fn(|g| 2 * ((b.scales[g / 4] >> (3 * (g % 4))) & 7) as i32 + 1)
    }
    fn quants(b: &BlockIq1M) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for (m, out) in q.chunks_exact_mut(8).enumerate() {
            let h = (b.qh[m / 2] >> (4 * (m % 2))) as usize;
            let idx = b.qs[m] as usize | (h & 7) << 8;
            out.copy_from_slice(&shifted8(IQ1S_GRID[idx], h & 8 != 0));
        }
        q
    }
}

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockIq1M], dst: &mut [f32]) {
    grid_quant::dequantize::<Iq1M>(src, dst)
}

/// Dot product of an IQ1_M row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockIq1M], a: &[BlockQ8K]) -> f32 {
    grid_quant::vec_dot::<Iq1M>(w, a)
}

/// The fastest IQ1_M kernels `isa` can run (capped to what this CPU supports).
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: grid_quant::scalar_variant::<Iq1M>(),
        avx2: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
        avx512: { kquant_vec_dot: x86::vec_dot_avx512, vec_dot_tile: x86::tile_avx2 },
    );
    v.kernels(DType::IQ1_M, ActFormat::Q8K)
}

/// x86 variants: the four ternary grid rows of a sub-block gathered by their 11-bit indices.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{BlockIq1M, Iq1M};
    use crate::quant::iq_grids::IQ1S_GRID;
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::iq::rows8;
    use crate::quant::x86::iq::{grid_dot_avx2, grid_dot_avx512, grid_tile_avx2, GridSimd};
    use crate::quant::TILE;

    /// The four qh nibbles of sub-block `j`, nibble `l` at bits `4l..4l+4`.
    #[inline(always)]
    fn nibbles(b: &BlockIq1M, j: usize) -> u32 {
        b.qh[2 * j] as u32 | (b.qh[2 * j + 1] as u32) << 8
    }

    impl GridSimd for Iq1M {
        const TERNARY: bool = true;

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn rows_avx2(b: &BlockIq1M, j: usize) -> __m256i {
            let h = nibbles(b, j) as usize;
            let idx = std::array::from_fn(|l| b.qs[4 * j + l] as usize | (h >> (4 * l) & 7) << 8);
            rows8(&IQ1S_GRID, idx)
        }

        #[inline(always)]
        fn signs(b: &BlockIq1M, j: usize) -> u32 {
            let h = nibbles(b, j);
            (0..4).fold(0, |m, l| {
                if h >> (4 * l + 3) & 1 == 1 {
                    m | 0xFF << (8 * l)
                } else {
                    m
                }
            })
        }

        #[inline(always)]
        fn scales2(b: &BlockIq1M, j: usize) -> [i16; 2] {
            let scale = |g: usize| 2 * ((b.scales[g / 4] >> (3 * (g % 4))) & 7) as i16 + 1;
            [scale(2 * j), scale(2 * j + 1)]
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockIq1M], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx2::<Iq1M>(w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
        grid_tile_avx2::<Iq1M>(n, w, a)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(w: &[BlockIq1M], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx512::<Iq1M>(w, a)
    }
}
