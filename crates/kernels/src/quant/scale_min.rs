//! What Q4_K and Q5_K share beyond their quant bits: super-blocks of 8 sub-blocks of 32, each
//! with a 6-bit scale and a 6-bit min against the `f16` super-scales `d` and `dmin`
//! (`x = d * sc[j] * q - dmin * mn[j]`), and the reference dot product built on that.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q4_k::unpack_scales;
use super::q8_k::BlockQ8K;

/// The first 16 bytes of a Q4_K or Q5_K super-block: super-scales and packed scales.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct Head {
    /// Super-scale of the sub-block scales.
    pub d: f16,
    /// Super-scale of the sub-block mins.
    pub dmin: f16,
    /// The 12 packed scale and min bytes (the Q4_K layout).
    pub scales: [u8; 12],
}

/// A Q4_K or Q5_K super-block: a [`Head`] at offset 0 (each format asserts its field
/// offsets), then its quant bits.
pub(crate) trait ScaleMinBlock: Pod {
    /// The super-scales and packed scales.
    #[inline(always)]
    fn head(&self) -> &Head {
        bytemuck::from_bytes(&bytemuck::bytes_of(self)[..std::mem::size_of::<Head>()])
    }
    /// The 32 unsigned quants of sub-block `j` (elements `32j..32j + 32`).
    fn sub_block(&self, j: usize) -> [u8; 32];
}

/// Panics unless the weight and activation rows hold the same number of super-blocks.
#[inline(always)]
pub(crate) fn check_blocks(w: usize, a: usize, name: &str) {
    assert_eq!(w, a, "{name} vec_dot: block count mismatch");
}

/// The reference dot product of a scale/min K-quant row with a Q8_K row: per super-block
/// `d_a * (d * Σ_j sc[j] Σ q a - dmin * Σ_j mn[j] (bsums[2j] + bsums[2j + 1]))`, the inner sums
/// exact integers, summed in `f32` in block order. `name` names the format in the panic.
pub(crate) fn vec_dot_ref<B: ScaleMinBlock>(w: &[B], a: &[BlockQ8K], name: &str) -> f32 {
    check_blocks(w.len(), a.len(), name);
    let mut sum = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let h = wb.head();
        let (sc, mn) = unpack_scales(&h.scales);
        let (mut isum, mut msum) = (0i32, 0i32);
        for j in 0..8 {
            let act = &ab.qs[32 * j..32 * j + 32];
            let dot: i32 = wb
                .sub_block(j)
                .iter()
                .zip(act)
                .map(|(&q, &a)| q as i32 * a as i32)
                .sum();
            isum += sc[j] as i32 * dot;
            msum += mn[j] as i32 * (ab.bsums[2 * j] as i32 + ab.bsums[2 * j + 1] as i32);
        }
        sum += ab.d * (h.d.to_f32() * isum as f32 - h.dmin.to_f32() * msum as f32);
    }
    sum
}
