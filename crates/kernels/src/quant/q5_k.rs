//! Q5_K: 5-bit weights in super-blocks of 256 with a 6-bit scale and a 6-bit min per
//! sub-block of 32 (5.5 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset  0: d       f16        super-scale for the sub-block scales
//! offset  2: dmin    f16        super-scale for the sub-block mins
//! offset  4: scales  [u8; 12]   8 six-bit scales and mins, packed exactly as in Q4_K
//! offset 16: qh      [u8; 32]   bit j of qh[l] = bit 4 of q of element 32j + l
//! offset 48: qs      [u8; 128]  low 4 bits, nibble-packed exactly as in Q4_K:
//!              qs[32p + l] low nibble -> element 64p + l, high nibble -> 64p + 32 + l
//! total 176 bytes
//!
//! x[32j + l] = d * sc[j] * q - dmin * mn[j],   q = nibble | bit_j(qh[l]) << 4  (0..=31)
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::format::quant_format;
use super::q4_k::{pack_scales, unpack_scales, ScaleMin};
use super::q8_k::{kquant_scalar_variant, quantize_blocks, BlockQ8K, QK_K};
use super::scale_min::{self, ScaleMinBlock};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One Q5_K super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    /// Super-scale of the sub-block scales.
    pub d: f16,
    /// Super-scale of the sub-block mins.
    pub dmin: f16,
    /// Packed 6-bit scales and mins (Q4_K layout).
    pub scales: [u8; 12],
    /// Fifth bits: bit `j` of `qh[l]` belongs to element `32j + l`.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits, nibble-packed.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == DType::Q5_K.block_bytes());
const _: () = assert!(
    std::mem::offset_of!(BlockQ5K, dmin) == 2 && std::mem::offset_of!(BlockQ5K, scales) == 4
);

/// The 5-bit quant of element `32j + l`.
#[inline(always)]
fn quant(b: &BlockQ5K, j: usize, l: usize) -> u8 {
    let low = (b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
    low | (((b.qh[l] >> j) & 1) << 4)
}

#[inline(always)]
fn dequantize_blocks(src: &[BlockQ5K], dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len() * QK_K,
        "Q5_K dequantize: length mismatch"
    );
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (sc, mn) = unpack_scales(&b.scales);
        let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
        for (j, yj) in y.chunks_exact_mut(32).enumerate() {
            let (dj, mj) = (d * sc[j] as f32, dmin * mn[j] as f32);
            for (l, out) in yj.iter_mut().enumerate() {
                *out = dj * quant(b, j, l) as f32 - mj;
            }
        }
    }
}

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q5_K`].
    Q5K { block: BlockQ5K, act: BlockQ8K, dtype: DType::Q5_K, act_format: ActFormat::Q8K,
         quantize_act: super::q8_k::quantize_ref }
);

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockQ5K], dst: &mut [f32]) {
    dequantize_blocks(src, dst)
}

/// Dot product of a Q5_K row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    scale_min::vec_dot_ref(w, a, "Q5_K")
}

impl ScaleMinBlock for BlockQ5K {
    #[inline(always)]
    fn sub_block(&self, j: usize) -> [u8; 32] {
        std::array::from_fn(|l| quant(self, j, l))
    }
}

/// Quantize `src` (a multiple of 256 values) to Q5_K: the reference quantizer (the Q4_K
/// scale/min search with 32 levels).
///
/// # Panics
/// If `src.len()` is not a multiple of 256.
pub fn quantize_ref(src: &[f32]) -> Vec<BlockQ5K> {
    quantize_blocks(src, quantize_block)
}

fn quantize_block(x: &[f32]) -> BlockQ5K {
    let p = ScaleMin::choose(x, 31);
    let q = p.quants(x, 31);
    let mut b = BlockQ5K {
        d: p.d,
        dmin: p.dmin,
        scales: pack_scales(&p.sc, &p.mn),
        qh: [0; QK_K / 8],
        qs: [0; QK_K / 2],
    };
    for (i, &qv) in q.iter().enumerate() {
        let (j, l) = (i / 32, i % 32);
        b.qs[32 * (j / 2) + l] |= (qv & 0xF) << (4 * (j % 2));
        b.qh[l] |= (qv >> 4) << j;
    }
    b
}

/// The fastest Q5_K kernels `isa` can run (capped to what this CPU supports).
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: kquant_scalar_variant::<Q5K>(),
        avx2: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
        avx512: { kquant_dequantize: x86::dequantize_avx512, kquant_vec_dot: x86::vec_dot_avx512 },
    );
    v.kernels(DType::Q5_K, ActFormat::Q8K)
}

/// x86 variants: the Q4_K kernels plus the fifth bit, shifted from `qh` into bit 4.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{dequantize_blocks, BlockQ5K};
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::load::{load256, load512};
    use crate::quant::x86::scale_min::{self, pair_sum_avx2, quad_sum_avx512};

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[BlockQ5K], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn dequantize_avx512(src: &[BlockQ5K], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    /// AVX2: for nibble pair `p`, `h = qh >> 2p` (16-bit shifts; the bits read never cross
    /// a byte), bit 0 of `h` moves to bit 4 with `<< 4`, bit 1 with `<< 3`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
        let (m0f, m10) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
        scale_min::dot_avx2(w, a, "Q5_K", |wb, ab, sc16| {
            let mut h = load256(&wb.qh, 0);
            let mut isum = _mm256_setzero_si256();
            for p in 0..4 {
                let q = load256(&wb.qs, 32 * p);
                let lo = _mm256_or_si256(
                    _mm256_and_si256(q, m0f),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(h), m10),
                );
                let hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q), m0f),
                    _mm256_and_si256(_mm256_slli_epi16::<3>(h), m10),
                );
                h = _mm256_srli_epi16::<2>(h);
                isum = _mm256_add_epi32(isum, pair_sum_avx2(sc16, (lo, hi), &ab.qs, p));
            }
            isum
        })
    }

    /// A vector whose low 256 bits hold i16 `lo` and high 256 bits i16 `hi`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    #[inline]
    fn halves(lo: i16, hi: i16) -> __m512i {
        _mm512_inserti64x4::<1>(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi))
    }

    /// AVX-512: the Q4_K scheme; `qh` is broadcast to both halves and shifted per half so
    /// the bit of sub-block `s` lands in bit 4 (left by `4 - s`, or right by `s - 4`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
        let (m0f, m10) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x10));
        let shifts = [halves(4, 3), halves(2, 1), halves(0, 1), halves(2, 3)];
        scale_min::dot_avx512(w, a, "Q5_K", |wb, ab, sc16| {
            let qh = _mm512_broadcast_i64x4(load256(&wb.qh, 0));
            let hb = [
                _mm512_sllv_epi16(qh, shifts[0]),
                _mm512_sllv_epi16(qh, shifts[1]),
                _mm512_srlv_epi16(qh, shifts[2]),
                _mm512_srlv_epi16(qh, shifts[3]),
            ];
            let mut isum = _mm512_setzero_si512();
            for k in 0..2 {
                let q = load512(&wb.qs, 64 * k);
                let lo = _mm512_and_si512(q, m0f);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m0f);
                // v | (hb & 0x10): A = v, B = hb, C = mask -> 0xF0 | (0xCC & 0xAA) = 0xF8.
                let v0 = _mm512_ternarylogic_epi32::<0xF8>(
                    _mm512_shuffle_i64x2::<0x44>(lo, hi),
                    hb[2 * k],
                    m10,
                );
                let v1 = _mm512_ternarylogic_epi32::<0xF8>(
                    _mm512_shuffle_i64x2::<0xEE>(lo, hi),
                    hb[2 * k + 1],
                    m10,
                );
                isum = quad_sum_avx512(isum, sc16, (v0, v1), &ab.qs, k);
            }
            isum
        })
    }
}
