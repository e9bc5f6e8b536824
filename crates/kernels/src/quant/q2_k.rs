//! Q2_K: 2-bit weights in super-blocks of 256 with a 4-bit scale and a 4-bit min per
//! sub-block of 16 (2.625 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset  0: scales [u8; 16]   sub-block s: scale sc[s] = low nibble, min mn[s] = high nibble
//! offset 16: qs     [u8; 64]   2-bit quants; element 128n + 32g + l (half n = 0..2,
//!              group g = 0..4, l = 0..32) is bits 2g..2g+2 of qs[32n + l]
//! offset 80: d      f16        super-scale for the sub-block scales
//! offset 82: dmin   f16        super-scale for the sub-block mins
//! total 84 bytes
//!
//! x[i] = d * sc[i / 16] * q - dmin * mn[i / 16],   q in 0..=3
//! ```
//!
//! The dot with a Q8_K block uses its 16-element `bsums` for the mins:
//! `a.d * (d * Σ_s sc[s] * Σ q*a.qs - dmin * Σ_s mn[s] * bsums[s])`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::format::quant_format;
use super::q8_k::{kquant_scalar_variant, quantize_blocks, BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One Q2_K super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    /// Per sub-block of 16: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// Packed 2-bit quants.
    pub qs: [u8; QK_K / 4],
    /// Super-scale of the sub-block scales.
    pub d: f16,
    /// Super-scale of the sub-block mins.
    pub dmin: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == DType::Q2_K.block_bytes());

/// The quant (0..=3) of element `i`.
#[inline(always)]
fn quant(b: &BlockQ2K, i: usize) -> u8 {
    let (n, g, l) = (i / 128, (i % 128) / 32, i % 32);
    (b.qs[32 * n + l] >> (2 * g)) & 3
}

#[inline(always)]
fn dequantize_blocks(src: &[BlockQ2K], dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len() * QK_K,
        "Q2_K dequantize: length mismatch"
    );
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
        for (s, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * (b.scales[s] & 0xF) as f32;
            let ml = dmin * (b.scales[s] >> 4) as f32;
            for (l, out) in ys.iter_mut().enumerate() {
                *out = dl * quant(b, 16 * s + l) as f32 - ml;
            }
        }
    }
}

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q2_K`].
    Q2K { block: BlockQ2K, act: BlockQ8K, dtype: DType::Q2_K, act_format: ActFormat::Q8K,
         quantize_act: super::q8_k::quantize_ref }
);

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockQ2K], dst: &mut [f32]) {
    dequantize_blocks(src, dst)
}

/// Dot product of a Q2_K row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "Q2_K vec_dot: block count mismatch");
    let mut sum = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let (mut isum, mut msum) = (0i32, 0i32);
        for s in 0..16 {
            let dot: i32 = (16 * s..16 * s + 16)
                .map(|i| quant(wb, i) as i32 * ab.qs[i] as i32)
                .sum();
            isum += (wb.scales[s] & 0xF) as i32 * dot;
            msum += (wb.scales[s] >> 4) as i32 * ab.bsums[s] as i32;
        }
        sum += ab.d * (wb.d.to_f32() * isum as f32 - wb.dmin.to_f32() * msum as f32);
    }
    sum
}

/// Quantize `src` (a multiple of 256 values) to Q2_K: the reference quantizer.
///
/// Each sub-block of 16 spans `[lo, hi]` with `lo = min(min x, 0)` (the min term is
/// subtracted, so it is never negative) in 3 steps; the 16 steps and the 16 mins are
/// quantized to 4 bits against `f16` super-scales, and every weight is re-quantized against
/// the final values.
///
/// # Panics
/// If `src.len()` is not a multiple of 256.
pub fn quantize_ref(src: &[f32]) -> Vec<BlockQ2K> {
    quantize_blocks(src, quantize_block)
}

/// `(super-scale, 4-bit values)` for non-negative `v`: `v ≈ scale * q`, `q` in 0..=15.
fn quantize_4bit(v: &[f32; 16]) -> (f16, [u8; 16]) {
    let max = v.iter().fold(0f32, |m, &x| m.max(x));
    let d = f16::from_f32(max / 15.0);
    let df = d.to_f32();
    let q = v.map(|x| {
        if df > 0.0 {
            (x / df).round().clamp(0.0, 15.0) as u8
        } else {
            0
        }
    });
    (d, q)
}

fn quantize_block(x: &[f32]) -> BlockQ2K {
    let mut step = [0f32; 16];
    let mut min = [0f32; 16];
    for (s, sub) in x.chunks_exact(16).enumerate() {
        let lo = sub.iter().fold(0f32, |m, &v| m.min(v));
        let hi = sub.iter().fold(f32::MIN, |m, &v| m.max(v));
        step[s] = (hi - lo) / 3.0;
        min[s] = -lo;
    }
    let (d, sc) = quantize_4bit(&step);
    let (dmin, mn) = quantize_4bit(&min);
    let mut b = BlockQ2K {
        scales: std::array::from_fn(|s| sc[s] | mn[s] << 4),
        qs: [0; QK_K / 4],
        d,
        dmin,
    };
    for (i, &v) in x.iter().enumerate() {
        let s = i / 16;
        let dl = d.to_f32() * sc[s] as f32;
        let ml = dmin.to_f32() * mn[s] as f32;
        let q = if dl > 0.0 {
            ((v + ml) / dl).round().clamp(0.0, 3.0) as u8
        } else {
            0
        };
        let (n, g, l) = (i / 128, (i % 128) / 32, i % 32);
        b.qs[32 * n + l] |= q << (2 * g);
    }
    b
}

/// The fastest Q2_K kernels `isa` can run (capped to what this CPU supports). AVX-512 CPUs
/// run the AVX2 kernels.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: kquant_scalar_variant::<Q2K>(),
        avx2: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
        avx512: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
    );
    v.kernels(DType::Q2_K, ActFormat::Q8K)
}

/// x86 variants. Per half of 128, the 8 scales of that half go to i16 lanes of both 128-bit
/// lanes; each group of 32 quants is one `vpmaddubsw` with the activations, whose two
/// 128-bit lanes are sub-blocks `2g` and `2g + 1`, weighted with `pshufb`-picked scales.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{dequantize_blocks, BlockQ2K};
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::kscales::pick_tables;
    use crate::quant::x86::load::{load128, load256};
    use crate::quant::x86::reduce::{f16_to_f32, hsum256};

    /// `pshufb` controls: table `g` puts i16 scale `2g` in lane 0 and `2g + 1` in lane 1.
    static PICK_PAIR: [[u8; 32]; 4] = pick_tables::<32, 4>(16);

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[BlockQ2K], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
        assert_eq!(w.len(), a.len(), "Q2_K vec_dot: block count mismatch");
        let m3 = _mm256_set1_epi8(3);
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let raw = load128(&wb.scales, 0);
            let sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
            let mn16 =
                _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(raw), _mm_set1_epi8(0x0F)));
            let msum = _mm256_madd_epi16(mn16, load256(&ab.bsums, 0));
            let halves = [
                _mm256_permute2x128_si256::<0x00>(sc16, sc16),
                _mm256_permute2x128_si256::<0x11>(sc16, sc16),
            ];
            let mut isum = _mm256_setzero_si256();
            for (n, scn) in halves.into_iter().enumerate() {
                let q = load256(&wb.qs, 32 * n);
                let groups = [
                    q,
                    _mm256_srli_epi16::<2>(q),
                    _mm256_srli_epi16::<4>(q),
                    _mm256_srli_epi16::<6>(q),
                ];
                for (g, qg) in groups.into_iter().enumerate() {
                    let p = _mm256_maddubs_epi16(
                        _mm256_and_si256(qg, m3),
                        load256(&ab.qs, 128 * n + 32 * g),
                    );
                    let s = _mm256_shuffle_epi8(scn, load256(&PICK_PAIR[g], 0));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, s));
                }
            }
            let d = ab.d * f16_to_f32(wb.d.to_bits());
            let dmin = ab.d * f16_to_f32(wb.dmin.to_bits());
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
            acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), acc);
        }
        hsum256(acc)
    }
}
