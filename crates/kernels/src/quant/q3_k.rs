//! Q3_K: 3-bit weights in super-blocks of 256 with a 6-bit signed scale per sub-block of
//! 16 (3.4375 bits per weight). Multiplied with [`ActFormat::Q8K`] activations. The
//! Q3_K_S / Q3_K_M / Q3_K_L files mix Q3_K with wider types.
//!
//! ```text
//! offset  0: hmask  [u8; 32]   bit b of hmask[l] = high bit of element 32b + l
//! offset 32: qs     [u8; 64]   low 2 bits; element 128n + 32g + l (half n = 0..2,
//!              group g = 0..4, l = 0..32) is bits 2g..2g+2 of qs[32n + l]
//! offset 96: scales [u8; 12]   16 six-bit scales ls[s]:
//!              low 4 bits:  s < 8: scales[s] & 0xF;  s >= 8: scales[s - 8] >> 4
//!              high 2 bits: scales[8 + s % 4] >> 2(s / 4) & 3
//! offset 108: d     f16        super-scale
//! total 110 bytes
//!
//! x[i] = d * (ls[i / 16] - 32) * q,   q = low2 - (high bit set ? 0 : 4)   (q in -4..=3)
//! ```
//!
//! The dot with a Q8_K block is `a.d * d * Σ_s (ls[s] - 32) * Σ q*a.qs`. The x86 kernel
//! multiplies the unsigned `q + 4` and folds the `-4` in through `bsums`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::format::quant_format;
use super::q8_k::{kquant_scalar_variant, quantize_blocks, BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One Q3_K super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    /// High bits of the quants.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of the quants.
    pub qs: [u8; QK_K / 4],
    /// Packed 6-bit sub-block scales.
    pub scales: [u8; 12],
    /// Super-scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == DType::Q3_K.block_bytes());

/// The 16 signed sub-block scales `ls - 32` (-32..=31).
#[inline(always)]
pub(crate) fn unpack_scales(s: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|i| {
        let low = (s[i % 8] >> (4 * (i / 8))) & 0xF;
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        (low | high << 4) as i8 - 32
    })
}

/// Pack 16 signed scales (each in -32..=31) into the 12-byte layout.
fn pack_scales(sc: &[i8; 16]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for (i, &v) in sc.iter().enumerate() {
        let u = (v + 32) as u8;
        s[i % 8] |= (u & 0xF) << (4 * (i / 8));
        s[8 + i % 4] |= (u >> 4) << (2 * (i / 4));
    }
    s
}

/// The signed quant (-4..=3) of element `i`.
#[inline(always)]
fn quant(b: &BlockQ3K, i: usize) -> i32 {
    let (n, g, l) = (i / 128, (i % 128) / 32, i % 32);
    let low = (b.qs[32 * n + l] >> (2 * g)) & 3;
    let high = (b.hmask[l] >> (i / 32)) & 1;
    low as i32 - if high == 0 { 4 } else { 0 }
}

#[inline(always)]
fn dequantize_blocks(src: &[BlockQ3K], dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len() * QK_K,
        "Q3_K dequantize: length mismatch"
    );
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let sc = unpack_scales(&b.scales);
        for (s, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * sc[s] as f32;
            for (l, out) in ys.iter_mut().enumerate() {
                *out = dl * quant(b, 16 * s + l) as f32;
            }
        }
    }
}

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q3_K`].
    Q3K { block: BlockQ3K, act: BlockQ8K, dtype: DType::Q3_K, act_format: ActFormat::Q8K,
         quantize_act: super::q8_k::quantize_ref }
);

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockQ3K], dst: &mut [f32]) {
    dequantize_blocks(src, dst)
}

/// Dot product of a Q3_K row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "Q3_K vec_dot: block count mismatch");
    let mut sum = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let sc = unpack_scales(&wb.scales);
        let mut isum = 0i32;
        for (s, &scale) in sc.iter().enumerate() {
            let dot: i32 = (16 * s..16 * s + 16)
                .map(|i| quant(wb, i) * ab.qs[i] as i32)
                .sum();
            isum += scale as i32 * dot;
        }
        sum += wb.d.to_f32() * ab.d * isum as f32;
    }
    sum
}

/// Quantize `src` (a multiple of 256 values) to Q3_K: the reference quantizer.
///
/// Each sub-block of 16 gets the signed step that maps its value of largest magnitude to
/// `-4` (the format has one more negative level); the 16 steps are quantized to 6 signed
/// bits against an `f16` super-scale, and every weight is re-quantized against its final
/// step.
///
/// # Panics
/// If `src.len()` is not a multiple of 256.
pub fn quantize_ref(src: &[f32]) -> Vec<BlockQ3K> {
    quantize_blocks(src, quantize_block)
}

fn signed_amax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

fn quantize_block(x: &[f32]) -> BlockQ3K {
    let step: [f32; 16] = std::array::from_fn(|s| signed_amax(&x[16 * s..16 * s + 16]) / -4.0);
    let d = f16::from_f32(signed_amax(&step) / -32.0);
    let df = d.to_f32();
    let sc = step.map(|v| {
        if df != 0.0 {
            (v / df).round().clamp(-32.0, 31.0) as i8
        } else {
            0
        }
    });
    let mut b = BlockQ3K {
        hmask: [0; QK_K / 8],
        qs: [0; QK_K / 4],
        scales: pack_scales(&sc),
        d,
    };
    for (i, &v) in x.iter().enumerate() {
        let dl = df * sc[i / 16] as f32;
        let q = if dl != 0.0 {
            (v / dl).round().clamp(-4.0, 3.0) as i32 + 4
        } else {
            4
        };
        let (n, g, l) = (i / 128, (i % 128) / 32, i % 32);
        b.qs[32 * n + l] |= ((q & 3) as u8) << (2 * g);
        b.hmask[l] |= ((q >> 2) as u8) << (i / 32);
    }
    b
}

/// The fastest Q3_K kernels `isa` can run (capped to what this CPU supports). AVX-512 CPUs
/// run the AVX2 kernels.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: kquant_scalar_variant::<Q3K>(),
        avx2: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
        avx512: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
    );
    v.kernels(DType::Q3_K, ActFormat::Q8K)
}

/// x86 variants: the Q2_K scheme on the unsigned quants `q + 4` (0..=7: low 2 bits, plus
/// 4 where the `hmask` bit is set), with `-4 * Σ_s sc[s] * bsums[s]` seeding the i32 sum.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{dequantize_blocks, unpack_scales, BlockQ3K};
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::kscales::pick_tables;
    use crate::quant::x86::load::{load128, load256};
    use crate::quant::x86::reduce::{f16_to_f32, hsum256};

    /// `pshufb` controls: table `g` puts i16 scale `2g` in lane 0 and `2g + 1` in lane 1.
    static PICK_PAIR: [[u8; 32]; 4] = pick_tables::<32, 4>(16);

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[BlockQ3K], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
        assert_eq!(w.len(), a.len(), "Q3_K vec_dot: block count mismatch");
        let (m3, m4) = (_mm256_set1_epi8(3), _mm256_set1_epi8(4));
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let sc = unpack_scales(&wb.scales);
            let sc16 = _mm256_cvtepi8_epi16(load128(&sc, 0));
            // -4 * Σ sc[s] * bsums[s], spread over 8 lanes.
            let t = _mm256_madd_epi16(sc16, load256(&ab.bsums, 0));
            let mut isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<2>(t));
            let hm = load256(&wb.hmask, 0);
            let halves = [
                _mm256_permute2x128_si256::<0x00>(sc16, sc16),
                _mm256_permute2x128_si256::<0x11>(sc16, sc16),
            ];
            for (n, scn) in halves.into_iter().enumerate() {
                let q = load256(&wb.qs, 32 * n);
                let groups = [
                    q,
                    _mm256_srli_epi16::<2>(q),
                    _mm256_srli_epi16::<4>(q),
                    _mm256_srli_epi16::<6>(q),
                ];
                for (g, qg) in groups.into_iter().enumerate() {
                    // hmask bit 4n + g of each byte, moved to bit 2 (16-bit shifts: the bit
                    // read stays within its byte).
                    let bit = _mm_cvtsi32_si128((4 * n + g) as i32);
                    let high =
                        _mm256_and_si256(_mm256_slli_epi16::<2>(_mm256_srl_epi16(hm, bit)), m4);
                    let qu = _mm256_or_si256(_mm256_and_si256(qg, m3), high);
                    let p = _mm256_maddubs_epi16(qu, load256(&ab.qs, 128 * n + 32 * g));
                    let s = _mm256_shuffle_epi8(scn, load256(&PICK_PAIR[g], 0));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, s));
                }
            }
            let dd = ab.d * f16_to_f32(wb.d.to_bits());
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
        }
        hsum256(acc)
    }
}
