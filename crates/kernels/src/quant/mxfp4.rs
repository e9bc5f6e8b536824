//! [`DType::MXFP4`]: the OCP microscaling 4-bit float format: blocks of 32 E2M1 values
//! (1 sign, 2 exponent, 1 mantissa bit) sharing one E8M0 power-of-two scale (17 bytes, 4.25
//! bits per weight), gpt-oss's expert weight format. Multiplied with [`ActFormat::Q8_0`]
//! activations.
//!
//! ```text
//! offset 0: e   u8         E8M0 exponent: the block scales by 2^(e - 127)
//! offset 1: qs  [u8; 16]   element j in the low nibble of qs[j], element j + 16 in the high
//! total 17 bytes
//!
//! x[j] = 2^(e - 128) * KVALUES[nibble j]
//! ```
//!
//! `KVALUES` are the E2M1 values doubled (0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6 times 2) so they
//! are integers; the halved scale `2^(e - 128)` compensates. With integer quants the dot
//! with a Q8_0 block is `2^(e - 128) * d_a * Σ KVALUES[i] * a_q`, the sum exact.

use bytemuck::{Pod, Zeroable};

use super::dispatch::select_variant;
use super::format::quant_format;
use super::q8_0::BlockQ8_0;
use super::rows::{scalar_variant, QK};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// The 16 E2M1 values, doubled, by 4-bit code (bit 3 is the sign).
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One MXFP4 block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockMxfp4 {
    /// E8M0 shared exponent.
    pub e: u8,
    /// E2M1 codes: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == 17);
const _: () = assert!(DType::MXFP4.block_bytes() == 17);

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::MXFP4`].
    Mxfp4 { block: BlockMxfp4, act: BlockQ8_0, dtype: DType::MXFP4, act_format: ActFormat::Q8_0, quantize_act: super::act::quantize_q8_0_ref }
);

/// `2^(e - 128)`: half the E8M0 scale (exact; subnormal for `e < 2`).
pub fn half_scale(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// The 32 integer quants `KVALUES[code]` of `b`, in element order.
fn quants(b: &BlockMxfp4) -> [i32; QK] {
    std::array::from_fn(|j| {
        let code = if j < QK / 2 {
            b.qs[j] & 0x0F
        } else {
            b.qs[j - QK / 2] >> 4
        };
        KVALUES[code as usize] as i32
    })
}

/// Reference dequantization: `x = 2^(e - 128) * KVALUES[code]`. `out` may end in a partial
/// block.
pub fn dequantize_ref(blocks: &[BlockMxfp4], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "MXFP4 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let d = half_scale(b.e);
        for (y, q) in o.iter_mut().zip(quants(b)) {
            *y = d * q as f32;
        }
    }
}

/// Reference dot product: per block `Σ KVALUES[code] * a_q * (2^(e - 128) * d_a)`.
pub fn vec_dot_ref(w: &[BlockMxfp4], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 = quants(x)
            .iter()
            .zip(&y.qs)
            .map(|(&q, &a)| q * a as i32)
            .sum();
        sum += sumi as f32 * (half_scale(x.e) * y.d.to_f32());
    }
    sum
}

/// Reference quantization (`x.len()` a multiple of 32): the exponent puts the block's
/// largest magnitude `m` at `2^floor(log2 m)`, i.e. the scale is `2^(floor(log2 m) - 2)`
/// (clamped to the E8M0 range), and each element takes the code of the nearest value
/// (the lower code on ties).
pub fn quantize_ref(x: &[f32]) -> Vec<BlockMxfp4> {
    assert!(
        x.len().is_multiple_of(QK),
        "MXFP4: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

fn quantize_block(x: &[f32]) -> BlockMxfp4 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let e = if amax > 0.0 && amax.is_finite() {
        (amax.log2().floor() as i32 - 2 + 127).clamp(0, 254) as u8
    } else {
        0
    };
    let d = half_scale(e);
    let code = |v: f32| {
        let mut best = 0;
        for (i, &k) in KVALUES.iter().enumerate() {
            if (d * k as f32 - v).abs() < (d * KVALUES[best] as f32 - v).abs() {
                best = i;
            }
        }
        best as u8
    };
    let qs = std::array::from_fn(|j| code(x[j]) | code(x[j + QK / 2]) << 4);
    BlockMxfp4 { e, qs }
}

/// The fastest MXFP4 kernels that `isa` (capped to what this CPU runs) allows. AVX-512 CPUs
/// run the AVX2 `vec_dot`. The tile kernel (prefill and batched rows: 4 weight rows x 4
/// activation rows, each weight block unpacked once for the activation rows) has no scalar
/// slot: without it the product calls `vec_dot` per pair, the reference.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: scalar_variant::<Mxfp4>(),
        avx2: { vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx2 },
        avx512: { vec_dot: x86::vec_dot_avx2, vec_dot_tile: x86::tile_avx512 },
    );
    v.kernels(DType::MXFP4, ActFormat::Q8_0)
}

/// x86 variant: the codes looked up in `KVALUES` with `pshufb`, signed byte products with
/// the activations, one `f32` scale product per block.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{half_scale, BlockMxfp4, KVALUES, QK};
    use crate::quant::q8_0::BlockQ8_0;
    use crate::quant::rows::{cast_blocks, check_dot};
    use crate::quant::x86::load::load_2x256;
    use crate::quant::x86::load::{load128, load256};
    use crate::quant::x86::nibbles::nibbles2_avx512;
    use crate::quant::x86::offset_tile::add_offset_step;
    use crate::quant::x86::reduce::{f16_to_f32, hsum256};
    use crate::quant::x86::tile::{
        add_odd_block, from_halves, hsum_half, reduce_tile_512, tile_rows,
    };
    use crate::quant::x86::tile_scales::{pair_scales, Tile};
    use crate::quant::TILE;

    /// Bytes of a weight block and of an activation (Q8_0) block.
    const W: usize = 17;
    const A: usize = 34;

    /// The 32 codes of the block at `b` looked up in `table` (`KVALUES` in both lanes), in
    /// element order: low nibbles in the low lane, high nibbles in the high lane.
    ///
    /// # Safety
    /// A whole block is readable at `b`; the CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(b: *const u8, table: __m256i) -> __m256i {
        let m0f = _mm_set1_epi8(0x0F);
        // SAFETY: bytes 1..17 of the block are readable (the caller's contract); unaligned.
        let q = unsafe { _mm_loadu_si128(b.add(1).cast()) };
        let idx = _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_and_si128(q, m0f)),
            _mm_and_si128(_mm_srli_epi16::<4>(q), m0f),
        );
        _mm256_shuffle_epi8(table, idx)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let (wb, ab) = (size_of::<BlockMxfp4>(), size_of::<BlockQ8_0>());
        let nb = check_dot(n, w, wb, a, ab);
        let w = cast_blocks::<BlockMxfp4>(&w[..nb * wb]);
        let a = cast_blocks::<BlockQ8_0>(&a[..nb * ab]);
        let table = _mm256_broadcastsi128_si256(load128(&KVALUES, 0));
        let (m0f, ones) = (_mm_set1_epi8(0x0F), _mm256_set1_epi16(1));
        let mut acc = _mm256_setzero_ps();
        for (x, y) in w.iter().zip(a.iter()) {
            let q = load128(&x.qs, 0);
            let idx = _mm256_inserti128_si256::<1>(
                _mm256_castsi128_si256(_mm_and_si128(q, m0f)),
                _mm_and_si128(_mm_srli_epi16::<4>(q), m0f),
            );
            let v = _mm256_shuffle_epi8(table, idx);
            let ya = load256(&y.qs, 0);
            // |v| * sign(y, v): exact, pairs sum to at most 2 * 12 * 127.
            let p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(ya, v));
            let sumi = _mm256_madd_epi16(p, ones);
            let d = half_scale(x.e) * f16_to_f32(y.d.to_bits());
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum256(acc)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
        let (nb, w, a) = tile_rows(n, w, W, a, A);
        // SAFETY: every row holds `nb` blocks (checked by `tile_rows`); the features are
        // enabled here.
        from_halves(a, |a| unsafe { half_avx2(nb, w, a) })
    }

    /// 4 weight rows x 2 activation rows (AVX2 has 16 registers), one block per step: each
    /// weight block's values looked up once, then `|v| * sign(a, v)` with both activation
    /// rows, as in [`vec_dot_avx2`].
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; every row holds `nb` blocks.
    // Not inlined: each tile makes two calls, and one body keeps the 16 AVX2 registers.
    #[inline(never)]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn half_avx2(nb: usize, w: [*const u8; TILE], a: [*const u8; 2]) -> [[f32; TILE]; 2] {
        let table = _mm256_broadcastsi128_si256(load128(&KVALUES, 0));
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); TILE]; 2];
        for i in 0..nb {
            // SAFETY: block i < nb of every row is in bounds (the caller's contract).
            let (ya, da) = unsafe {
                (
                    a.map(|p| _mm256_loadu_si256(p.add(i * A + 2).cast())),
                    a.map(|p| f16_to_f32(p.add(i * A).cast::<u16>().read_unaligned())),
                )
            };
            for r in 0..TILE {
                // SAFETY: as above.
                let (v, e) = unsafe { (values(w[r].add(i * W), table), *w[r].add(i * W)) };
                let (abs, dw) = (_mm256_sign_epi8(v, v), half_scale(e));
                for j in 0..2 {
                    // |v| * sign(a, v): exact, pairs sum to at most 2 * 12 * 127.
                    let p = _mm256_maddubs_epi16(abs, _mm256_sign_epi8(ya[j], v));
                    let sumi = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                    acc[j][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da[j]), sumi, acc[j][r]);
                }
            }
        }
        hsum_half(acc)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn tile_avx512(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
        let rows = (w, a);
        let (nb, wp, ap) = tile_rows(n, w, W, a, A);
        // SAFETY: every row holds `nb` blocks (checked by `tile_rows`); the features are
        // enabled here.
        let mut out = unsafe { tile_core_avx512(nb, wp, ap) };
        add_odd_block(&mut out, nb, |r, j, i| {
            vec_dot_avx2(QK, &rows.0[r][i * W..][..W], &rows.1[j][i * A..][..A])
        });
        out
    }

    /// `2^(e - 128)` ([`half_scale`]) of the 8 exponent bytes in `e`, as 8 floats.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn half_scales8(e: [u8; 8]) -> __m256 {
        let e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(i64::from_le_bytes(e)));
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
        let sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small))
    }

    /// The tile over the first `nb / 2 * 2` blocks, two blocks per step: the codes looked up
    /// as `KVALUES + 128` (unsigned, for `vpdpbusd`), minus `128 sum(a)` once per activation
    /// block pair; each weight block pair unpacked once for the 4 activation rows.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; every weight row holds `nb`
    /// MXFP4 blocks and every activation row `nb` Q8_0 blocks.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn tile_core_avx512(nb: usize, w: [*const u8; TILE], a: [*const u8; TILE]) -> Tile {
        let bias = _mm512_set1_epi8(-128);
        let table =
            _mm512_broadcast_i32x4(_mm_xor_si128(load128(&KVALUES, 0), _mm_set1_epi8(-128)));
        let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
        let mut i = 0;
        while i + 2 <= nb {
            // SAFETY: blocks i and i+1 < nb of every row are in bounds.
            let (wq, e, aq, as_) = unsafe {
                (
                    w.map(|p| nibbles2_avx512(p.add(i * W + 1), p.add((i + 1) * W + 1))),
                    std::array::from_fn::<u8, 8, _>(|k| *w[k / 2].add((i + k % 2) * W)),
                    a.map(|p| load_2x256(p.add(i * A + 2), p.add((i + 1) * A + 2))),
                    pair_scales(a, i, A),
                )
            };
            let ws = _mm512_castps256_ps512(half_scales8(e));
            let wq = wq.map(|idx| _mm512_shuffle_epi8(table, idx));
            add_offset_step(&mut acc, wq, aq, bias, ws, as_);
            i += 2;
        }
        reduce_tile_512(acc)
    }
}
