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

use super::q4_k::{pack_scales, unpack_scales, ScaleMin};
use super::dispatch::select_variant;
use super::format::quant_format;
use super::q8_k::{block_count, kquant_scalar_variant, BlockQ8K, QK_K};
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
    assert_eq!(w.len(), a.len(), "Q5_K vec_dot: block count mismatch");
    let mut sum = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let (sc, mn) = unpack_scales(&wb.scales);
        let (mut isum, mut msum) = (0i32, 0i32);
        for j in 0..8 {
            let act = &ab.qs[32 * j..32 * j + 32];
            let dot: i32 = act
                .iter()
                .enumerate()
                .map(|(l, &a)| quant(wb, j, l) as i32 * a as i32)
                .sum();
            isum += sc[j] as i32 * dot;
            msum += mn[j] as i32 * (ab.bsums[2 * j] as i32 + ab.bsums[2 * j + 1] as i32);
        }
        sum += ab.d * (wb.d.to_f32() * isum as f32 - wb.dmin.to_f32() * msum as f32);
    }
    sum
}

/// Quantize `src` (a multiple of 256 values) to Q5_K: the reference quantizer (the Q4_K
/// scale/min search with 32 levels).
///
/// # Panics
/// If `src.len()` is not a multiple of 256.
pub fn quantize_ref(src: &[f32]) -> Vec<BlockQ5K> {
    block_count(src.len());
    src.chunks_exact(QK_K).map(quantize_block).collect()
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
    use crate::quant::x86::kscales::{block_scales_mins, mins_dot, PICK256, PICK512};
    use crate::quant::x86::load::{load256, load512};
    use crate::quant::x86::reduce::{f16_to_f32, hsum128, hsum256};
    use crate::quant::q8_k::BlockQ8K;

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
        assert_eq!(w.len(), a.len(), "Q5_K vec_dot: block count mismatch");
        let (m0f, m10) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = _mm_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let (sc16, mn16) = block_scales_mins(wb);
            let dd = ab.d * f16_to_f32(wb.d.to_bits());
            let dm = ab.d * f16_to_f32(wb.dmin.to_bits());
            let mins = _mm_cvtepi32_ps(mins_dot(mn16, &ab.bsums));
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dm), mins, acc_m);
            let sc16 = _mm256_broadcastsi128_si256(sc16);
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
                let p0 = _mm256_maddubs_epi16(lo, load256(&ab.qs, 64 * p));
                let p1 = _mm256_maddubs_epi16(hi, load256(&ab.qs, 64 * p + 32));
                let s0 = _mm256_shuffle_epi8(sc16, load256(&PICK256[2 * p], 0));
                let s1 = _mm256_shuffle_epi8(sc16, load256(&PICK256[2 * p + 1], 0));
                let sum = _mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1));
                isum = _mm256_add_epi32(isum, sum);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
        }
        hsum256(acc) - hsum128(acc_m)
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
        assert_eq!(w.len(), a.len(), "Q5_K vec_dot: block count mismatch");
        let (m0f, m10) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x10));
        let shifts = [halves(4, 3), halves(2, 1), halves(0, 1), halves(2, 3)];
        let mut acc = _mm512_setzero_ps();
        let mut acc_m = _mm_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let (sc16, mn16) = block_scales_mins(wb);
            let dd = ab.d * f16_to_f32(wb.d.to_bits());
            let dm = ab.d * f16_to_f32(wb.dmin.to_bits());
            let mins = _mm_cvtepi32_ps(mins_dot(mn16, &ab.bsums));
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dm), mins, acc_m);
            let sc16 = _mm512_broadcast_i32x4(sc16);
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
                let s0 = _mm512_shuffle_epi8(sc16, load512(&PICK512[2 * k], 0));
                let s1 = _mm512_shuffle_epi8(sc16, load512(&PICK512[2 * k + 1], 0));
                let p0 = _mm512_maddubs_epi16(v0, load512(&ab.qs, 128 * k));
                let p1 = _mm512_maddubs_epi16(v1, load512(&ab.qs, 128 * k + 64));
                isum = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum, p0, s0), p1, s1);
            }
            acc = _mm512_fmadd_ps(_mm512_set1_ps(dd), _mm512_cvtepi32_ps(isum), acc);
        }
        _mm512_reduce_add_ps(acc) - hsum128(acc_m)
    }
}
