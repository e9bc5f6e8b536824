//! IQ3_S: super-blocks of 256 weights, each group of 4 one row of a 512-row 4-wide grid of
//! odd magnitudes (`IQ3S_GRID`, 1..=15), an explicit sign bit per weight and a 4-bit scale
//! per sub-block of 32 (3.44 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset   0: d      f16        super-scale
//! offset   2: qs     [u8; 64]   low 8 bits of the grid row of each group of 4
//! offset  66: qh     [u8; 8]    bit k of qh[j] = bit 8 of the row of group 8j + k
//! offset  74: signs  [u8; 32]   bit k of signs[m] set: element 8m + k is negative
//! offset 106: scales [u8; 4]    nibble j % 2 of scales[j / 2] = s, scale of sub-block j
//! total 110 bytes
//!
//! x = d * (1 + 2 s) * grid * sign
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::grid_quant::{self, signed4, GridQuant};
use super::iq_grids::IQ3S_GRID;
use super::q8_k::{BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One IQ3_S super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq3S {
    /// Super-scale.
    pub d: f16,
    /// Low 8 bits of the grid rows.
    pub qs: [u8; QK_K / 4],
    /// Bit 8 of the grid rows.
    pub qh: [u8; QK_K / 32],
    /// One sign bit per weight.
    pub signs: [u8; QK_K / 8],
    /// 4-bit sub-block scales.
    pub scales: [u8; QK_K / 64],
}

const _: () = assert!(std::mem::size_of::<BlockIq3S>() == 110);
const _: () = assert!(std::mem::size_of::<BlockIq3S>() == DType::IQ3_S.block_bytes());

/// The grid row of group `k` (0..8) of sub-block `j`.
#[inline(always)]
pub(crate) fn row(b: &BlockIq3S, j: usize, k: usize) -> u32 {
    let idx = b.qs[8 * j + k] as usize | ((b.qh[j] as usize >> k) & 1) << 8;
    IQ3S_GRID[idx]
}

/// The scale multiplier `1 + 2 s` of sub-block `j`.
#[inline(always)]
pub(crate) fn scale(b: &BlockIq3S, j: usize) -> i32 {
    2 * ((b.scales[j / 2] >> (4 * (j % 2))) & 0xF) as i32 + 1
}

/// The [`GridQuant`] decoding of IQ3_S.
pub(crate) struct Iq3S;

impl GridQuant for Iq3S {
    type Block = BlockIq3S;
    const DTYPE: DType = DType::IQ3_S;
    const FACTOR: f32 = 1.0;
    fn d(b: &BlockIq3S) -> f32 {
        b.d.to_f32()
    }
    fn scales(b: &BlockIq3S) -> [i32; 16] {
        std::array::from_fn(|g| scale(b, g / 2))
    }
    fn quants(b: &BlockIq3S) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for (m, group) in q.chunks_exact_mut(4).enumerate() {
            let signs = b.signs[m / 2] >> (4 * (m % 2));
            group.copy_from_slice(&signed4(row(b, m / 8, m % 8), signs));
        }
        q
    }
}

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockIq3S], dst: &mut [f32]) {
    grid_quant::dequantize::<Iq3S>(src, dst)
}

/// Dot product of an IQ3_S row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockIq3S], a: &[BlockQ8K]) -> f32 {
    grid_quant::vec_dot::<Iq3S>(w, a)
}

/// The fastest IQ3_S kernels `isa` can run (capped to what this CPU supports). AVX-512 CPUs
/// run the AVX2 kernel: with explicit sign bytes, the AVX-512 form measured slower.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: grid_quant::scalar_variant::<Iq3S>(),
        avx2: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
        avx512: { kquant_vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
    );
    v.kernels(DType::IQ3_S, ActFormat::Q8K)
}

/// x86 variants: the eight 4-byte grid rows of a sub-block gathered by their 9-bit indices.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{scale, BlockIq3S, Iq3S};
    use crate::quant::iq_grids::IQ3S_GRID;
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::iq::{bytes8, gather4};
    use crate::quant::x86::iq::{grid_dot_avx2, grid_tile_avx2, GridSimd};
    use crate::quant::TILE;

    impl GridSimd for Iq3S {
        const TERNARY: bool = false;

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn rows_avx2(b: &BlockIq3S, j: usize) -> __m256i {
            let lo = bytes8(std::array::from_fn(|k| b.qs[8 * j + k]));
            let bit = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let hi = _mm256_srlv_epi32(_mm256_set1_epi32(b.qh[j] as i32), bit);
            let hi = _mm256_slli_epi32::<8>(_mm256_and_si256(hi, _mm256_set1_epi32(1)));
            // SAFETY: indices are 8 + 1 bits, below 512, the grid's length.
            unsafe { gather4(&IQ3S_GRID, _mm256_or_si256(lo, hi)) }
        }

        #[inline(always)]
        fn signs(b: &BlockIq3S, j: usize) -> u32 {
            u32::from_le_bytes(std::array::from_fn(|l| b.signs[4 * j + l]))
        }

        #[inline(always)]
        fn scales2(b: &BlockIq3S, j: usize) -> [i16; 2] {
            let s = scale(b, j) as i16;
            [s, s]
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockIq3S], a: &[BlockQ8K]) -> f32 {
        grid_dot_avx2::<Iq3S>(w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
        grid_tile_avx2::<Iq3S>(n, w, a)
    }
}
