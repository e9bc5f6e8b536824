//! Q4_K: 4-bit weights in super-blocks of 256 with a 6-bit scale and a 6-bit min per
//! sub-block of 32 (4.5 bits per weight). Multiplied with [`ActFormat::Q8K`] activations.
//!
//! ```text
//! offset  0: d       f16        super-scale for the sub-block scales
//! offset  2: dmin    f16        super-scale for the sub-block mins
//! offset  4: scales  [u8; 12]   8 six-bit scales sc[j] and 8 six-bit mins mn[j], packed:
//!              byte 0..4 : sc[0..4]  (low 6 bits) | top 2 bits of sc[4..8]
//!              byte 4..8 : mn[0..4]  (low 6 bits) | top 2 bits of mn[4..8]
//!              byte 8..12: low 4 bits of sc[4..8] | low 4 bits of mn[4..8] << 4
//! offset 16: qs      [u8; 128]  nibbles; byte qs[32p + l] holds
//!              low  nibble = q of element 64p + l       (sub-block 2p)
//!              high nibble = q of element 64p + 32 + l  (sub-block 2p + 1)
//! total 144 bytes
//!
//! x[32j + l] = d * sc[j] * q - dmin * mn[j]
//! ```
//!
//! The dot with a Q8_K block is `a.d * (d * Σ_j sc[j] * Σ_l q*a.qs - dmin * Σ_j mn[j] *
//! (bsums[2j] + bsums[2j+1]))`, all inner sums exact integers.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::select_variant;
use super::format::quant_format;
use super::q8_k::{kquant_scalar_variant, quantize_blocks, BlockQ8K, QK_K};
use super::scale_min::{self, ScaleMinBlock};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One Q4_K super-block (see the module docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-scale of the sub-block scales.
    pub d: f16,
    /// Super-scale of the sub-block mins.
    pub dmin: f16,
    /// Packed 6-bit scales and mins.
    pub scales: [u8; 12],
    /// Packed 4-bit quants.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == DType::Q4_K.block_bytes());
const _: () = assert!(
    std::mem::offset_of!(BlockQ4K, dmin) == 2 && std::mem::offset_of!(BlockQ4K, scales) == 4
);

/// Unpack the 12 scale bytes into (`sc[0..8]`, `mn[0..8]`), each 0..=63.
#[inline(always)]
pub(crate) fn unpack_scales(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (w0, w1, w2) = (word(0), word(1), word(2));
    let sc_lo = w0 & LOW6;
    let mn_lo = w1 & LOW6;
    let sc_hi = (w2 & LOW4) | (((w0 >> 6) & TOP2) << 4);
    let mn_hi = ((w2 >> 4) & LOW4) | (((w1 >> 6) & TOP2) << 4);
    let join = |lo: u32, hi: u32| (((hi as u64) << 32) | lo as u64).to_le_bytes();
    (join(sc_lo, sc_hi), join(mn_lo, mn_hi))
}

/// Pack 6-bit scales and mins (each `< 64`) into the 12-byte layout.
pub(crate) fn pack_scales(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4);
    }
    s
}

#[inline(always)]
fn dequantize_block(b: &BlockQ4K, y: &mut [f32]) {
    let (sc, mn) = unpack_scales(&b.scales);
    let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
    for p in 0..4 {
        let q = &b.qs[32 * p..32 * p + 32];
        let (d1, m1) = (d * sc[2 * p] as f32, dmin * mn[2 * p] as f32);
        let (d2, m2) = (d * sc[2 * p + 1] as f32, dmin * mn[2 * p + 1] as f32);
        let y = &mut y[64 * p..64 * p + 64];
        for l in 0..32 {
            y[l] = d1 * (q[l] & 0xF) as f32 - m1;
            y[32 + l] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

#[inline(always)]
fn dequantize_blocks(src: &[BlockQ4K], dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len() * QK_K,
        "Q4_K dequantize: length mismatch"
    );
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        dequantize_block(b, y);
    }
}

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q4_K`].
    Q4K { block: BlockQ4K, act: BlockQ8K, dtype: DType::Q4_K, act_format: ActFormat::Q8K,
         quantize_act: super::q8_k::quantize_ref }
);

/// Dequantize `src` into `dst` (`dst.len() == 256 * src.len()`): the reference.
pub fn dequantize_ref(src: &[BlockQ4K], dst: &mut [f32]) {
    dequantize_blocks(src, dst)
}

/// Dot product of a Q4_K row with a Q8_K row of the same number of blocks: the reference.
pub fn vec_dot_ref(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    scale_min::vec_dot_ref(w, a, "Q4_K")
}

impl ScaleMinBlock for BlockQ4K {
    /// Sub-blocks `2p` and `2p + 1` are the low and high nibbles of `qs[32p..32p + 32]`.
    #[inline(always)]
    fn sub_block(&self, j: usize) -> [u8; 32] {
        let (q, shift) = (&self.qs[32 * (j / 2)..], 4 * (j % 2));
        std::array::from_fn(|l| (q[l] >> shift) & 0xF)
    }
}

/// Quantize `src` (a multiple of 256 values) to Q4_K: the reference quantizer.
///
/// Each sub-block gets the (scale, min) pair from a small search that minimizes squared
/// error (a 21-point step-size grid, each refit by least squares); the 8 scales and 8 mins
/// are then quantized to 6 bits against `f16` super-scales, and every weight is
/// re-quantized against the final values.
///
/// # Panics
/// If `src.len()` is not a multiple of 256.
pub fn quantize_ref(src: &[f32]) -> Vec<BlockQ4K> {
    quantize_blocks(src, quantize_block)
}

fn quantize_block(x: &[f32]) -> BlockQ4K {
    let p = ScaleMin::choose(x, 15);
    let q = p.quants(x, 15);
    let mut qs = [0u8; QK_K / 2];
    for (i, b) in qs.iter_mut().enumerate() {
        let (pair, l) = (i / 32, i % 32);
        *b = q[64 * pair + l] | (q[64 * pair + 32 + l] << 4);
    }
    BlockQ4K {
        d: p.d,
        dmin: p.dmin,
        scales: pack_scales(&p.sc, &p.mn),
        qs,
    }
}

/// Quantized per-sub-block affine parameters of one super-block (shared with Q5_K):
/// `x ≈ d * sc[j] * q - dmin * mn[j]`.
pub(crate) struct ScaleMin {
    pub d: f16,
    pub dmin: f16,
    pub sc: [u8; 8],
    pub mn: [u8; 8],
}

impl ScaleMin {
    /// Fit each sub-block of 32 with `q ∈ 0..=levels`, then quantize scales and mins.
    pub(crate) fn choose(x: &[f32], levels: u8) -> ScaleMin {
        let mut s = [0f32; 8];
        let mut m = [0f32; 8];
        for (j, sub) in x.chunks_exact(32).enumerate() {
            (s[j], m[j]) = fit_scale_min(sub, levels);
        }
        let (d, sc) = quantize_6bit(&s);
        let (dmin, mn) = quantize_6bit(&m);
        ScaleMin { d, dmin, sc, mn }
    }

    /// The quants of all 256 values against the final (quantized) scales and mins.
    pub(crate) fn quants(&self, x: &[f32], levels: u8) -> [u8; QK_K] {
        let mut q = [0u8; QK_K];
        for (j, (sub, qj)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
            let s = self.d.to_f32() * self.sc[j] as f32;
            let m = self.dmin.to_f32() * self.mn[j] as f32;
            for (qv, &v) in qj.iter_mut().zip(sub) {
                *qv = if s > 0.0 {
                    ((v + m) / s).round().clamp(0.0, levels as f32) as u8
                } else {
                    0
                };
            }
        }
        q
    }
}

/// `f16` super-scale and 6-bit multipliers for 8 non-negative values.
fn quantize_6bit(v: &[f32; 8]) -> (f16, [u8; 8]) {
    let max = v.iter().fold(0f32, |a, &b| a.max(b));
    let d = f16::from_f32((max / 63.0).min(f16::MAX.to_f32()));
    let df = d.to_f32();
    if df <= 0.0 {
        return (f16::ZERO, [0; 8]);
    }
    (d, v.map(|x| (x / df).round().clamp(0.0, 63.0) as u8))
}

/// Fit `x ≈ s * q - m` with `q = clamp(round((x + m) / s), 0, levels)`, `s >= 0`, `m >= 0`.
///
/// Tries 21 initial step sizes around `(max - min) / levels` (with `min` clamped to `<= 0`),
/// refits `(s, m)` by least squares for each quantization, and keeps the pair with the
/// smallest squared error.
pub(crate) fn fit_scale_min(x: &[f32], levels: u8) -> (f32, f32) {
    let lo = x.iter().fold(0f32, |a, &v| a.min(v));
    let hi = x.iter().fold(lo, |a, &v| a.max(v));
    let nmax = levels as f32;
    if hi <= lo {
        return (0.0, -lo);
    }
    let quant = |v: f32, s: f32, m: f32| {
        if s > 0.0 {
            ((v + m) / s).round().clamp(0.0, nmax)
        } else {
            0.0
        }
    };
    let err = |s: f32, m: f32| {
        x.iter()
            .map(|&v| (s * quant(v, s, m) - m - v).powi(2))
            .sum::<f32>()
    };
    let (s0, m0) = ((hi - lo) / nmax, -lo);
    let mut best = (err(s0, m0), s0, m0);
    for step in 0..=20 {
        let s_try = (hi - lo) / (nmax - 1.0 + 0.1 * step as f32);
        let (s, m) = least_squares(x, |v| quant(v, s_try, -lo)).unwrap_or((s0, m0));
        let e = err(s, m);
        if e < best.0 {
            best = (e, s, m);
        }
    }
    (best.1, best.2)
}

/// Least-squares `(s, m)` for `x ≈ s * q(x) - m` subject to `m >= 0`; `None` if all `q` are equal.
fn least_squares(x: &[f32], q: impl Fn(f32) -> f32) -> Option<(f32, f32)> {
    let n = x.len() as f32;
    let (mut sq, mut sqq, mut sx, mut sxq) = (0f32, 0f32, 0f32, 0f32);
    for &v in x {
        let qv = q(v);
        (sq, sqq, sx, sxq) = (sq + qv, sqq + qv * qv, sx + v, sxq + v * qv);
    }
    let det = n * sqq - sq * sq;
    if det <= 0.0 {
        return None;
    }
    let s = (n * sxq - sq * sx) / det;
    let b = (sqq * sx - sq * sxq) / det;
    let (s, b) = if b > 0.0 { (sxq / sqq, 0.0) } else { (s, b) };
    (s > 0.0).then_some((s, -b))
}

/// The fastest Q4_K kernels `isa` can run (capped to what this CPU supports).
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: kquant_scalar_variant::<Q4K>(),
        avx2: { kquant_dequantize: x86::dequantize_avx2, kquant_vec_dot: x86::vec_dot_avx2 },
        avx512: { kquant_dequantize: x86::dequantize_avx512, kquant_vec_dot: x86::vec_dot_avx512 },
    );
    v.kernels(DType::Q4_K, ActFormat::Q8K)
}

/// x86 variants. Both dots keep per-sub-block integer sums exact and apply `d` and `dmin`
/// once per super-block in `f32`, so they differ from the reference only by float rounding.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use super::{dequantize_blocks, BlockQ4K};
    use crate::quant::q8_k::BlockQ8K;
    use crate::quant::x86::load::{load256, load512};
    use crate::quant::x86::scale_min::{self, pair_sum_avx2, quad_sum_avx512};

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dequantize_avx2(src: &[BlockQ4K], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn dequantize_avx512(src: &[BlockQ4K], dst: &mut [f32]) {
        dequantize_blocks(src, dst)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn vec_dot_avx2(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
        let m0f = _mm256_set1_epi8(0x0F);
        scale_min::dot_avx2(w, a, "Q4_K", |wb, ab, sc16| {
            let mut isum = _mm256_setzero_si256();
            for p in 0..4 {
                let q = load256(&wb.qs, 32 * p);
                let lo = _mm256_and_si256(q, m0f);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m0f);
                isum = _mm256_add_epi32(isum, pair_sum_avx2(sc16, (lo, hi), &ab.qs, p));
            }
            isum
        })
    }

    /// AVX-512: 128 quants per step. The 64 low nibbles of `qs[64k..64k + 64]` are sub-blocks
    /// `[4k | 4k+2]` and the high nibbles `[4k+1 | 4k+3]`; two `vshufi64x2` regroup them as
    /// `[4k | 4k+1]`, `[4k+2 | 4k+3]` to match the activation order. `vpmaddubsw` makes i16 pair
    /// sums and `vpdpwssd` multiplies by the sub-block scale and accumulates in i32.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn vec_dot_avx512(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
        let m0f = _mm512_set1_epi8(0x0F);
        scale_min::dot_avx512(w, a, "Q4_K", |wb, ab, sc16| {
            let mut isum = _mm512_setzero_si512();
            for k in 0..2 {
                let q = load512(&wb.qs, 64 * k);
                let lo = _mm512_and_si512(q, m0f);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m0f);
                let v0 = _mm512_shuffle_i64x2::<0x44>(lo, hi);
                let v1 = _mm512_shuffle_i64x2::<0xEE>(lo, hi);
                isum = quad_sum_avx512(isum, sc16, (v0, v1), &ab.qs, k);
            }
            isum
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scale/min of sub-block `j` exactly as the GGUF spec spells it.
    fn spec_scale_min(j: usize, q: &[u8; 12]) -> (u8, u8) {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            (
                (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
                (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
            )
        }
    }

    #[test]
    fn unpack_matches_spec_and_pack_inverts() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..1000 {
            let mut s = [0u8; 12];
            for b in &mut s {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *b = (state >> 56) as u8;
            }
            let (sc, mn) = unpack_scales(&s);
            for j in 0..8 {
                assert_eq!(
                    (sc[j], mn[j]),
                    spec_scale_min(j, &s),
                    "sub-block {j} of {s:?}"
                );
            }
            assert_eq!(pack_scales(&sc, &mn), s);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_scale_unpack_matches_scalar() {
        if !Isa::available().contains(&Isa::Avx2) {
            return; // nothing to compare on this CPU: the SIMD path is never selected
        }
        let mut state = 0x0fed_cba9_8765_4321u64;
        for _ in 0..1000 {
            let mut block = BlockQ4K::zeroed();
            for b in bytemuck::bytes_of_mut(&mut block) {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *b = (state >> 56) as u8;
            }
            // SAFETY: AVX2 + FMA + F16C presence was checked above.
            let (sc, mn) = unsafe { crate::quant::x86::kscales::block_scales_mins(&block) };
            let (mut sc16, mut mn16) = ([0u16; 8], [0u16; 8]);
            // SAFETY: each array is 16 writable bytes; stores are unaligned.
            unsafe {
                std::arch::x86_64::_mm_storeu_si128(sc16.as_mut_ptr().cast(), sc);
                std::arch::x86_64::_mm_storeu_si128(mn16.as_mut_ptr().cast(), mn);
            }
            let (want_sc, want_mn) = unpack_scales(&block.scales);
            assert_eq!(sc16, want_sc.map(u16::from));
            assert_eq!(mn16, want_mn.map(u16::from));
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn pick_tables_select_the_right_scale() {
        assert_eq!(&crate::quant::x86::kscales::PICK256[3][..4], &[6, 7, 6, 7]);
        assert_eq!(&crate::quant::x86::kscales::PICK512[1][..2], &[4, 5]);
        assert_eq!(&crate::quant::x86::kscales::PICK512[1][32..34], &[6, 7]);
        assert_eq!(&crate::quant::x86::kscales::PICK512[3][62..], &[14, 15]);
    }
}
