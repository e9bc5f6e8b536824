//! IQ4_XS: the IQ4_NL codebook in super-blocks of 256 with a 6-bit signed scale per
//! sub-block of 32 (4.25 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset 0: d        f16        super-scale
//! offset 2: scales_h u16        bits 2j..2j+2 = high 2 bits of sub-block j's scale
//! offset 4: scales_l [u8; 4]    nibble j % 2 of byte j / 2 = low 4 bits of sub-block j's scale
//! offset 8: qs       [u8; 128]  codebook indices; qs[16j + l] holds
//!             low  nibble = index of element 32j + l
//!             high nibble = index of element 32j + 16 + l
//! total 136 bytes
//!
//! x[32j + l] = d * (ls[j] - 32) * CODEBOOK[index],  ls[j] in 0..=63
//! ```
//!
//! The dot with a Q8_K block is `a.d * d * Σ_j (ls[j] - 32) * Σ_l CODEBOOK[i] * a.qs`, the
//! inner sums exact integers.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::format::quant_format;
use super::iq4_nl::{nearest_index, signed_amax, CODEBOOK};
use super::q8_k::{kquant_scalar_variant, quantize_blocks, BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One IQ4_XS super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq4Xs {
    /// Super-scale.
    pub d: f16,
    /// High 2 bits of the 8 sub-block scales.
    pub scales_h: u16,
    /// Low 4 bits of the 8 sub-block scales.
    pub scales_l: [u8; QK_K / 64],
    /// Codebook indices, nibble-packed per sub-block.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == 136);
const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == DType::IQ4_XS.block_bytes());

/// The 8 signed sub-block scales `ls - 32` (-32..=31).
#[inline(always)]
pub(crate) fn scales(b: &BlockIq4Xs) -> [i32; 8] {
    std::array::from_fn(|j| {
        let lo = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
        let hi = (b.scales_h >> (2 * j)) & 3;
        (lo as i32 | (hi as i32) << 4) - 32
    })
}

/// The 32 signed quants `CODEBOOK[index]` of sub-block `j`.
#[inline(always)]
fn sub_block(b: &BlockIq4Xs, j: usize) -> [i32; 32] {
    let q = &b.qs[16 * j..16 * j + 16];
    std::array::from_fn(|l| {
        let i = if l < 16 { q[l] & 0xF } else { q[l - 16] >> 4 };
        CODEBOOK[i as usize] as i32
    })
}

#[inline(always)]
fn dequantize_blocks(src: &[BlockIq4Xs], dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len() * QK_K,
        "IQ4_XS dequantize: length mismatch"
    );
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (j, (yj, s)) in y.chunks_exact_mut(32).zip(scales(b)).enumerate() {
            let dl = d * s as f32;
            for (out, q) in yj.iter_mut().zip(sub_block(b, j)) {
                *out = dl * q as f32;
            }
        }
    }
}

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::IQ4_XS`].
    Iq4Xs { block: BlockIq4Xs, act: BlockQ8K, dtype: DType::IQ4_XS, act_format: ActFormat::Q8K,
         quantize_act: super::q8_k::quantize_ref }
);

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockIq4Xs], dst: &mut [f32]) {
    dequantize_blocks(src, dst)
}

/// Dot product of an IQ4_XS row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "IQ4_XS vec_dot: block count mismatch");
    let mut sum = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let mut isum = 0i32;
        for (j, s) in scales(wb).into_iter().enumerate() {
            let dot: i32 = sub_block(wb, j)
                .iter()
                .zip(&ab.qs[32 * j..32 * j + 32])
                .map(|(&q, &a)| q * a as i32)
                .sum();
            isum += s * dot;
        }
        sum += wb.d.to_f32() * ab.d * isum as f32;
    }
    sum
}

/// Quantize `src` (a multiple of 256 values) to IQ4_XS: the reference quantizer.
///
/// Each sub-block's scale maps its value of largest magnitude to the codebook's end
/// (`-127`); the 8 scales are quantized to 6 signed bits against an `f16` super-scale, and
/// every weight takes the nearest codebook entry under its final scale.
///
/// # Panics
/// If `src.len()` is not a multiple of 256.
pub fn quantize_ref(src: &[f32]) -> Vec<BlockIq4Xs> {
    quantize_blocks(src, quantize_block)
}

fn quantize_block(x: &[f32]) -> BlockIq4Xs {
    let s: [f32; 8] =
        std::array::from_fn(|j| signed_amax(&x[32 * j..32 * j + 32]) / CODEBOOK[0] as f32);
    let d = f16::from_f32(signed_amax(&s) / -32.0);
    let df = d.to_f32();
    let mut b = BlockIq4Xs {
        d,
        scales_h: 0,
        scales_l: [0; QK_K / 64],
        qs: [0; QK_K / 2],
    };
    for (j, &sj) in s.iter().enumerate() {
        let ls = if df != 0.0 {
            (sj / df).round().clamp(-32.0, 31.0) as i32
        } else {
            0
        };
        let stored = (ls + 32) as u8;
        b.scales_l[j / 2] |= (stored & 0xF) << (4 * (j % 2));
        b.scales_h |= ((stored >> 4) as u16) << (2 * j);
        let step = df * ls as f32;
        let id = if step != 0.0 { 1.0 / step } else { 0.0 };
        let sub = &x[32 * j..32 * j + 32];
        for l in 0..16 {
            b.qs[16 * j + l] = nearest_index(sub[l] * id) | nearest_index(sub[l + 16] * id) << 4;
        }
    }
    b
}

/// The fastest IQ4_XS kernels `isa` can run (capped to what this CPU supports). AVX-512
/// CPUs run the AVX2 kernels.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: kquant_scalar_variant::<Iq4Xs>(),
        avx2: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
        avx512: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
    );
    v.kernels(DType::IQ4_XS, ActFormat::Q8K)
}

/// x86 variants: per sub-block, the indices looked up in the codebook with `pshufb`, signed
/// byte products with the activations, and one i16 multiply by the sub-block scale.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{dequantize_blocks, scales, BlockIq4Xs};
    use crate::quant::iq4_nl::x86::codebook_avx2;
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::load::{load128, load256};
    use crate::quant::x86::reduce::{f16_to_f32, hsum256};

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[BlockIq4Xs], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
        assert_eq!(w.len(), a.len(), "IQ4_XS vec_dot: block count mismatch");
        let (table, m0f) = (codebook_avx2(), _mm_set1_epi8(0x0F));
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let dd = ab.d * f16_to_f32(wb.d.to_bits());
            let mut isum = _mm256_setzero_si256();
            for (j, s) in scales(wb).into_iter().enumerate() {
                let q = load128(&wb.qs, 16 * j);
                let idx = _mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(_mm_and_si128(q, m0f)),
                    _mm_and_si128(_mm_srli_epi16::<4>(q), m0f),
                );
                let x = _mm256_shuffle_epi8(table, idx);
                let y = load256(&ab.qs, 32 * j);
                // |x| * sign(y, x): exact, pairs sum to at most 2 * 127 * 127 < 2^15.
                let p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16(s as i16)));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
        }
        hsum256(acc)
    }
}
