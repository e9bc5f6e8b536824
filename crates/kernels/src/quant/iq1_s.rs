//! IQ1_S: super-blocks of 256 weights, each group of 8 one row of a 2048-row grid of
//! ternary values (`IQ1S_GRID`, -1, 0, 1) shifted by `±1/8`, with a 3-bit scale and the
//! shift's sign per sub-block of 32 (1.56 bits per weight). Multiplied with
//! [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset  0: d   f16         super-scale
//! offset  2: qs  [u8; 32]    low 8 bits of the grid row of group m (elements 8m ..)
//! offset 34: qh  [u16; 8]    per sub-block j:
//!              bits 3l..3l+3 = bits 8..11 of the row of group 4j + l
//!              bits 12..15   = s, the sub-block scale
//!              bit 15        = sign of the shift (set: -1/8)
//! total 50 bytes
//!
//! x = d * (2 s + 1) * (grid ± 1/8) = (d * (2 s + 1)) / 8 * (8 grid ± 1)
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::grid_quant::{self, grid_byte, GridQuant};
use super::iq_grids::IQ1S_GRID;
use super::q8_k::{BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One IQ1_S super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq1S {
    /// Super-scale.
    pub d: f16,
    /// Low 8 bits of the grid rows.
    pub qs: [u8; QK_K / 8],
    /// High grid bits, scale and shift sign of each sub-block of 32.
    pub qh: [u16; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIq1S>() == 50);
const _: () = assert!(std::mem::size_of::<BlockIq1S>() == DType::IQ1_S.block_bytes());

/// The 8 values `8 * grid + shift` (shift = ±1) of a ternary grid row.
#[inline(always)]
pub(crate) fn shifted8(row: u64, negative_shift: bool) -> [i8; 8] {
    let shift = if negative_shift { -1 } else { 1 };
    std::array::from_fn(|k| 8 * grid_byte(row, k) + shift)
}

/// The [`GridQuant`] decoding of IQ1_S.
pub(crate) struct Iq1S;

impl GridQuant for Iq1S {
    type Block = BlockIq1S;
    const DTYPE: DType = DType::IQ1_S;
    const FACTOR: f32 = 0.125;
    fn d(b: &BlockIq1S) -> f32 {
        b.d.to_f32()
    }
    fn scales(b: &BlockIq1S) -> [i32; 16] {
        std::array::from_fn(|g| 2 * ((b.qh[g / 2] >> 12) & 7) as i32 + 1)
    }
    fn quants(b: &BlockIq1S) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for (m, out) in q.chunks_exact_mut(8).enumerate() {
            let h = b.qh[m / 4];
            let idx = b.qs[m] as usize | ((h as usize >> (3 * (m % 4))) & 7) << 8;
            out.copy_from_slice(&shifted8(IQ1S_GRID[idx], h & 0x8000 != 0));
        }
        q
    }
}

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockIq1S], dst: &mut [f32]) {
    grid_quant::dequantize::<Iq1S>(src, dst)
}

/// Dot product of an IQ1_S row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockIq1S], a: &[BlockQ8K]) -> f32 {
    grid_quant::vec_dot::<Iq1S>(w, a)
}

/// The fastest IQ1_S kernels `isa` can run (capped to what this CPU supports).
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: grid_quant::scalar_variant::<Iq1S>(),
        avx2: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
        avx512: { kquant_vec_dot: x86::vec_dot_avx512, vec_dot_tile: x86::tile_avx2 },
    );
    v.kernels(DType::IQ1_S, ActFormat::Q8K)
}

/// x86 variants: the four ternary grid rows of a sub-block gathered by their 11-bit indices.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{BlockIq1S, Iq1S};
    use crate::quant::iq_grids::IQ1S_GRID;
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::iq::rows8;
    use crate::quant::x86::iq::{grid_dot_avx2, grid_dot_avx512, grid_tile_avx2, GridSimd};
    use crate::quant::TILE;

    impl GridSimd for Iq1S {
        const TERNARY: bool = true;

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn rows_avx2(b: &BlockIq1S, j: usize) -> __m256i {
            let h = b.qh[j] as usize;
            let idx = std::array::from_fn(|l| b.qs[4 * j + l] as usize | (h >> (3 * l) & 7) << 8);
            rows8(&IQ1S_GRID, idx)
        }

        #[inline(always)]
        fn signs(b: &BlockIq1S, j: usize) -> u32 {
            if b.qh[j] & 0x8000 != 0 {
                u32::MAX
            } else {
                0
            }
        }

        #[inline(always)]
        fn scales2(b: &BlockIq1S, j: usize) -> [i16; 2] {
            let s = 2 * ((b.qh[j] >> 12) & 7) as i16 + 1;
            [s, s]
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockIq1S], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx2::<Iq1S>(w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
        grid_tile_avx2::<Iq1S>(n, w, a)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(w: &[BlockIq1S], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx512::<Iq1S>(w, a)
    }
}
