//! Q6_K: 6-bit weights in super-blocks of 256 with a signed 8-bit scale per sub-block of 16
//! (6.5625 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset   0: ql      [u8; 128]  low 4 bits    offset 192: scales [i8; 16]  one per 16 values
//! offset 128: qh      [u8; 64]   high 2 bits   offset 208: d      f16       super-scale
//! total 210 bytes
//!
//! Element i = 128n + 32g + l   (half n = 0..2, group g = 0..4, l = 0..32):
//!   low  = ql[64n + 32(g % 2) + l] >> 4(g / 2) & 0xF     (g 0,1: low nibbles; g 2,3: high)
//!   high = qh[32n + l] >> 2g & 3
//!   x[i] = d * scales[i / 16] * ((low | high << 4) - 32)
//! ```
//!
//! The dot with a Q8_K block folds the `-32` into `bsums`:
//! `a.d * d * (Σ_s sc[s] * Σ q*a.qs - 32 * Σ_s sc[s] * bsums[s])`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::format::quant_format;
use super::q8_k::{kquant_scalar_variant, quantize_blocks, BlockQ8K, QK_K};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One Q6_K super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// Signed scale of each sub-block of 16.
    pub scales: [i8; QK_K / 16],
    /// Super-scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == DType::Q6_K.block_bytes());

/// The unsigned 6-bit quant (0..=63) of element `i`.
#[inline(always)]
fn quant(b: &BlockQ6K, i: usize) -> u8 {
    let (n, g, l) = (i / 128, (i % 128) / 32, i % 32);
    let low = (b.ql[64 * n + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0xF;
    let high = (b.qh[32 * n + l] >> (2 * g)) & 3;
    low | (high << 4)
}

#[inline(always)]
fn dequantize_blocks(src: &[BlockQ6K], dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len() * QK_K,
        "Q6_K dequantize: length mismatch"
    );
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (s, ys) in y.chunks_exact_mut(16).enumerate() {
            let ds = d * b.scales[s] as f32;
            for (l, out) in ys.iter_mut().enumerate() {
                *out = ds * (quant(b, 16 * s + l) as i32 - 32) as f32;
            }
        }
    }
}

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q6_K`].
    Q6K { block: BlockQ6K, act: BlockQ8K, dtype: DType::Q6_K, act_format: ActFormat::Q8K,
         quantize_act: super::q8_k::quantize_ref }
);

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockQ6K], dst: &mut [f32]) {
    dequantize_blocks(src, dst)
}

/// Dot product of a Q6_K row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "Q6_K vec_dot: block count mismatch");
    let mut sum = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let mut isum = 0i32;
        for s in 0..16 {
            let dot: i32 = (16 * s..16 * s + 16)
                .map(|i| (quant(wb, i) as i32 - 32) * ab.qs[i] as i32)
                .sum();
            isum += wb.scales[s] as i32 * dot;
        }
        sum += wb.d.to_f32() * ab.d * isum as f32;
    }
    sum
}

/// Quantize `src` (a multiple of 256 values) to Q6_K: the reference quantizer.
///
/// Each sub-block of 16 gets the signed scale that minimizes its squared error (a grid of
/// candidates, each refit by least squares); the 16 scales are quantized to `i8` against
/// an `f16` super-scale and every weight is re-quantized against the final scale.
///
/// # Panics
/// If `src.len()` is not a multiple of 256.
pub fn quantize_ref(src: &[f32]) -> Vec<BlockQ6K> {
    quantize_blocks(src, quantize_block)
}

fn quantize_block(x: &[f32]) -> BlockQ6K {
    let mut s = [0f32; 16];
    for (j, sub) in x.chunks_exact(16).enumerate() {
        s[j] = fit_symmetric(sub);
    }
    let smax = s.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = f16::from_f32((smax / 127.0).min(f16::MAX.to_f32()));
    let df = d.to_f32();
    let scales = s.map(|v| {
        if df > 0.0 {
            (v / df).round().clamp(-127.0, 127.0) as i8
        } else {
            0
        }
    });
    let mut q = [32u8; QK_K];
    for (j, (sub, qj)) in x.chunks_exact(16).zip(q.chunks_exact_mut(16)).enumerate() {
        let step = df * scales[j] as f32;
        if step != 0.0 {
            for (qv, &v) in qj.iter_mut().zip(sub) {
                *qv = ((v / step).round().clamp(-32.0, 31.0) + 32.0) as u8;
            }
        }
    }
    pack(&q, scales, d)
}

/// Pack unsigned 6-bit quants into the Q6_K layout (the inverse of [`quant`]).
fn pack(q: &[u8; QK_K], scales: [i8; 16], d: f16) -> BlockQ6K {
    let mut b = BlockQ6K {
        ql: [0; QK_K / 2],
        qh: [0; QK_K / 4],
        scales,
        d,
    };
    for (i, &qv) in q.iter().enumerate() {
        let (n, g, l) = (i / 128, (i % 128) / 32, i % 32);
        b.ql[64 * n + 32 * (g % 2) + l] |= (qv & 0xF) << (4 * (g / 2));
        b.qh[32 * n + l] |= (qv >> 4) << (2 * g);
    }
    b
}

/// The signed scale `s` minimizing `Σ (x - s * q)^2` with `q = clamp(round(x / s), -32, 31)`.
///
/// Candidates map the largest-magnitude value to `±t` for `t` in 28..=32.5 (either sign,
/// since `q` has one more negative level); each is refined by a least-squares fit.
fn fit_symmetric(x: &[f32]) -> f32 {
    let max = x
        .iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    if max == 0.0 {
        return 0.0;
    }
    let quant = |v: f32, s: f32| (v / s).round().clamp(-32.0, 31.0);
    let err = |s: f32| {
        x.iter()
            .map(|&v| (v - s * quant(v, s)).powi(2))
            .sum::<f32>()
    };
    let mut best = (f32::INFINITY, 0.0);
    for t in 0..10 {
        for sign in [-1.0f32, 1.0] {
            let s_try = sign * max / (28.0 + 0.5 * t as f32);
            let (sxq, sqq) = x.iter().fold((0f32, 0f32), |(a, b), &v| {
                let q = quant(v, s_try);
                (a + v * q, b + q * q)
            });
            let s = if sqq > 0.0 { sxq / sqq } else { s_try };
            for cand in [s_try, s] {
                let e = err(cand);
                if e < best.0 {
                    best = (e, cand);
                }
            }
        }
    }
    best.1
}

/// The fastest Q6_K kernels `isa` can run (capped to what this CPU supports).
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: kquant_scalar_variant::<Q6K>(),
        avx2: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
        avx512: { kquant_dequantize: x86::dequantize_avx512, kquant_vec_dot: x86::vec_dot_avx512 },
    );
    v.kernels(DType::Q6_K, ActFormat::Q8K)
}

/// x86 variants. The unsigned quants (0..=63) go through `vpmaddubsw`; the `-32` is applied
/// once per block as `-32 * Σ sc[s] * bsums[s]`, which seeds the i32 accumulator.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{dequantize_blocks, BlockQ6K};
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::kscales::pick_tables;
    use crate::quant::x86::load::{load128, load256, load512};
    use crate::quant::x86::reduce::{f16_to_f32, hsum256};

    /// AVX2 `pshufb` controls: table `g` puts i16 scale `2g` in lane 0 and `2g + 1` in lane 1.
    static PICK_PAIR: [[u8; 32]; 4] = pick_tables::<32, 4>(16);
    /// AVX-512 `vpermw` indices: vector `g` (of 4 per block) gets scale `4g + lane` per lane.
    static LANE_SCALES: [[u16; 32]; 4] = lane_scales();

    const fn lane_scales() -> [[u16; 32]; 4] {
        let mut out = [[0u16; 32]; 4];
        let mut g = 0;
        while g < 4 {
            let mut e = 0;
            while e < 32 {
                out[g][e] = (4 * g + e / 8) as u16;
                e += 1;
            }
            g += 1;
        }
        out
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[BlockQ6K], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn dequantize_avx512(src: &[BlockQ6K], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    /// `-32 * Σ_s sc[s] * bsums[s]` over 8 i32 lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn offset_term(sc16: __m256i, bsums: &[i16; 16]) -> __m256i {
        let t = _mm256_madd_epi16(load256(bsums, 0), sc16);
        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(t))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
        assert_eq!(w.len(), a.len(), "Q6_K vec_dot: block count mismatch");
        let (m0f, m30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let dd = ab.d * f16_to_f32(wb.d.to_bits());
            let sc16 = _mm256_cvtepi8_epi16(load128(&wb.scales, 0));
            let mut isum = offset_term(sc16, &ab.bsums);
            // Scales of half n (8 i16) in both 128-bit lanes.
            let halves = [
                _mm256_permute2x128_si256::<0x00>(sc16, sc16),
                _mm256_permute2x128_si256::<0x11>(sc16, sc16),
            ];
            for (n, scn) in halves.into_iter().enumerate() {
                let (ql0, ql1) = (load256(&wb.ql, 64 * n), load256(&wb.ql, 64 * n + 32));
                let qh = load256(&wb.qh, 32 * n);
                let v = [
                    (_mm256_and_si256(ql0, m0f), _mm256_slli_epi16::<4>(qh)),
                    (_mm256_and_si256(ql1, m0f), _mm256_slli_epi16::<2>(qh)),
                    (_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m0f), qh),
                    (
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m0f),
                        _mm256_srli_epi16::<2>(qh),
                    ),
                ];
                for (g, (low, high)) in v.into_iter().enumerate() {
                    let q = _mm256_or_si256(low, _mm256_and_si256(high, m30));
                    let p = _mm256_maddubs_epi16(q, load256(&ab.qs, 128 * n + 32 * g));
                    let s = _mm256_shuffle_epi8(scn, load256(&PICK_PAIR[g], 0));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, s));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
        }
        hsum256(acc)
    }

    /// A vector whose low 256 bits hold i16 `lo` and high 256 bits i16 `hi`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    #[inline]
    fn halves(lo: i16, hi: i16) -> __m512i {
        _mm512_inserti64x4::<1>(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi))
    }

    /// AVX-512: 128 quants per half-block in two vectors; `ql`'s 64 bytes already match the
    /// activation order (low nibbles = elements 0..64, high nibbles = 64..128), and each
    /// 128-bit lane of the `vpmaddubsw` result is one sub-block of 16.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
        assert_eq!(w.len(), a.len(), "Q6_K vec_dot: block count mismatch");
        let (m0f, m30) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        let (shl, shr) = (halves(4, 2), halves(0, 2));
        let idx = [0, 1, 2, 3].map(|g| load512(&LANE_SCALES[g], 0));
        let mut acc = _mm512_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let dd = ab.d * f16_to_f32(wb.d.to_bits());
            let sc16 = _mm256_cvtepi8_epi16(load128(&wb.scales, 0));
            let mut isum = _mm512_zextsi256_si512(offset_term(sc16, &ab.bsums));
            let sc16 = _mm512_zextsi256_si512(sc16);
            for n in 0..2 {
                let ql = load512(&wb.ql, 64 * n);
                let qh = _mm512_broadcast_i64x4(load256(&wb.qh, 32 * n));
                // (A & C) | B with A = nibbles, B = masked high bits, C = 0x0F -> 0xEC.
                let hl = _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30);
                let hh = _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30);
                let vl = _mm512_ternarylogic_epi32::<0xEC>(ql, hl, m0f);
                let vh = _mm512_ternarylogic_epi32::<0xEC>(_mm512_srli_epi16::<4>(ql), hh, m0f);
                let sl = _mm512_permutexvar_epi16(idx[2 * n], sc16);
                let sh = _mm512_permutexvar_epi16(idx[2 * n + 1], sc16);
                let pl = _mm512_maddubs_epi16(vl, load512(&ab.qs, 128 * n));
                let ph = _mm512_maddubs_epi16(vh, load512(&ab.qs, 128 * n + 64));
                isum = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum, pl, sl), ph, sh);
            }
            acc = _mm512_fmadd_ps(_mm512_set1_ps(dd), _mm512_cvtepi32_ps(isum), acc);
        }
        _mm512_reduce_add_ps(acc)
    }
}
