//! What the Q8_K-activation i-quant formats (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
//! IQ1_M) have in common: every super-block of 256 weights decodes to
//!
//! ```text
//! x[i] = (d * s[i / 16]) * FACTOR * q[i]
//! ```
//!
//! with `d` an `f32` super-scale, `s` 16 positive integer sub-block multipliers, `q` small
//! signed integers (grid values with their signs applied; IQ1's `8 * (grid ± 1/8)`), and
//! `FACTOR` a power of two per format. Each format supplies those three decodings
//! ([`GridQuant`]); the reference dequantization and dot product here follow from them, and
//! the dot with a Q8_K block is `d * a.d * FACTOR * Σ_g s[g] * Σ_{i in g} q[i] * a.qs[i]`,
//! its inner sums exact integers.

use bytemuck::Pod;

use super::dispatch::Variant;
use super::q8_k::{split_row, weight_blocks, BlockQ8K, QK_K};
use super::DType;

/// A grid i-quant format: how one block decodes to `(d, s, q)` (see the module docs).
pub(crate) trait GridQuant {
    /// The `#[repr(C)]` super-block.
    type Block: Pod;
    /// The tensor type (for messages).
    const DTYPE: DType;
    /// The power of two that scales every `s * q` product.
    const FACTOR: f32;
    /// The super-scale.
    fn d(b: &Self::Block) -> f32;
    /// The integer multiplier of each group of 16 weights.
    fn scales(b: &Self::Block) -> [i32; QK_K / 16];
    /// The signed integer quants of the 256 weights.
    fn quants(b: &Self::Block) -> [i8; QK_K];
}

/// Reference dequantization of format `F`: `dst.len()` must be `256 * src.len()`.
pub(crate) fn dequantize<F: GridQuant>(src: &[F::Block], dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len() * QK_K,
        "{} dequantize: length mismatch",
        F::DTYPE
    );
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, q) = (F::d(b), F::quants(b));
        for (g, s) in F::scales(b).into_iter().enumerate() {
            let dl = d * s as f32 * F::FACTOR;
            for (out, &v) in y[16 * g..16 * g + 16].iter_mut().zip(&q[16 * g..]) {
                *out = dl * v as f32;
            }
        }
    }
}

/// Reference dot product of format `F` with a Q8_K row of the same number of blocks.
pub(crate) fn vec_dot<F: GridQuant>(w: &[F::Block], a: &[BlockQ8K]) -> f32 {
    assert_eq!(
        w.len(),
        a.len(),
        "{} vec_dot: block count mismatch",
        F::DTYPE
    );
    let mut sum = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let q = F::quants(wb);
        let mut isum = 0i32;
        for (g, s) in F::scales(wb).into_iter().enumerate() {
            let dot: i32 = q[16 * g..16 * g + 16]
                .iter()
                .zip(&ab.qs[16 * g..])
                .map(|(&q, &a)| q as i32 * a as i32)
                .sum();
            isum += s * dot;
        }
        sum += F::d(wb) * ab.d * F::FACTOR * isum as f32;
    }
    sum
}

/// The scalar variant of format `F`: its reference kernels on byte rows.
pub(crate) fn scalar_variant<F: GridQuant>() -> Variant {
    Variant::scalar(
        |src, dst| dequantize::<F>(weight_blocks(src, dst.len()), dst),
        |n, w, a| {
            let (w, a) = split_row::<F::Block>(n, w, a);
            vec_dot::<F>(w, a)
        },
    )
}

/// Byte `k` of grid entry `g` (a row packed little-endian), as a signed value.
#[inline(always)]
pub(crate) fn grid_byte(g: u64, k: usize) -> i8 {
    (g >> (8 * k)) as u8 as i8
}

/// The 8 values of 8-wide grid row `g`, negated where bit `k` of `signs` is set.
#[inline(always)]
pub(crate) fn signed8(g: u64, signs: u8) -> [i8; 8] {
    std::array::from_fn(|k| {
        let v = grid_byte(g, k);
        if signs >> k & 1 == 1 {
            -v
        } else {
            v
        }
    })
}

/// The 4 values of 4-wide grid row `g`, negated where bit `k` of `signs` is set.
#[inline(always)]
pub(crate) fn signed4(g: u32, signs: u8) -> [i8; 4] {
    let s = signed8(g as u64, signs);
    [s[0], s[1], s[2], s[3]]
}
