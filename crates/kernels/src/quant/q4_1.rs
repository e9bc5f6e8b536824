//! [`DType::Q4_1`]: blocks of 32 weights as 4-bit unsigned quants with a scale and a minimum
//! (20 bytes, 5 bits per weight). Multiplied with [`ActFormat::Q8_1`] activations.
//!
//! ```text
//! BlockQ4_1 (20 bytes)
//! +--------+--------+----------------------------------------------+
//! | d: f16 | m: f16 | qs[0] qs[1] ...                       qs[15] |
//! +--------+--------+----------------------------------------------+
//! qs[j] = x[j] quant in the low nibble | x[j + 16] quant in the high nibble << 4
//! x[j] = q[j] * d + m,  q in 0..=15
//! ```
//!
//! Dot product with a Q8_1 block `(d_a, s_a = d_a * sum(a_q), a_q)`:
//! `sum_j (q_j d + m) (a_qj d_a) = d d_a sum_j q_j a_qj + m s_a` — the minimum costs one
//! multiply per block, and `q_j` being unsigned suits `maddubs` / `vpdpbusd` directly.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::act::BlockQ8_1;
use super::dispatch::select_variant;
use super::format::quant_format;
use super::rows::{scalar_variant, QK};
use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// One Q4_1 block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (offset).
    pub m: f16,
    /// Packed quants: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(DType::Q4_1.block_bytes() == 20);

const B: usize = 20;
const A: usize = 36;

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q4_1`].
    Q4_1 { block: BlockQ4_1, act: BlockQ8_1, dtype: DType::Q4_1, act_format: ActFormat::Q8_1, quantize_act: super::act::quantize_q8_1_ref }
);

/// Reference quantization (llama.cpp's `quantize_row_q4_1_ref`): `d = (max - min) / 15`,
/// `q = min(15, trunc((x - min) / d + 0.5))`. `x.len()` must be a multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ4_1> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q4_1: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

fn quantize_block(x: &[f32]) -> BlockQ4_1 {
    let (min, max) = x
        .iter()
        .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    let mut qs = [0u8; QK / 2];
    for (j, b) in qs.iter_mut().enumerate() {
        *b = q(x[j]) | q(x[j + QK / 2]) << 4;
    }
    BlockQ4_1 {
        d: f16::from_f32(d),
        m: f16::from_f32(min),
        qs,
    }
}

/// Reference dequantization: `x = q * d + m` (a rounded multiply, then a rounded add).
pub fn dequantize_ref(blocks: &[BlockQ4_1], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "Q4_1 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (j, &q) in b.qs.iter().enumerate() {
            o[j] = (q & 0x0F) as f32 * d + m;
            o[j + QK / 2] = (q >> 4) as f32 * d + m;
        }
    }
}

/// Reference dot product: per block `(d * d_a) * sum(q * a_q) + m * s_a`, summed in `f32`.
pub fn vec_dot_ref(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for (j, &q) in x.qs.iter().enumerate() {
            sumi += (q & 0x0F) as i32 * y.qs[j] as i32 + (q >> 4) as i32 * y.qs[j + QK / 2] as i32;
        }
        sum += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sum
}

/// The fastest Q4_1 kernels that `isa` (capped to what this CPU runs) allows.
pub fn kernels(isa: Isa) -> TypeKernels {
    let v = select_variant!(isa,
        scalar: scalar_variant::<Q4_1>(),
        avx2: {
            dequantize: x86::dequantize_avx2,
            vec_dot: x86::vec_dot_avx2,
            vec_dot_tile: x86::tile::vec_dot_tile_avx2,
        },
        avx512: {
            dequantize: x86::dequantize_avx512,
            vec_dot: x86::vec_dot_avx512,
            vec_dot_tile: x86::tile::vec_dot_tile_avx512,
        },
    );
    v.kernels(DType::Q4_1, ActFormat::Q8_1)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 (`maddubs`) and AVX-512 VNNI (`vpdpbusd`) Q4_1 x Q8_1 kernels. Pointers passed to
    //! the `unsafe fn`s address whole blocks (checked by the safe wrappers); loads are
    //! unaligned. Both blocks start with two `f16`s, `(d, m)` and `(d_a, s_a)`, which are
    //! converted together: `[d, m, d_a, s_a] * [d_a, s_a, d, m] = [d d_a, m s_a, ..]`.
    use std::arch::x86_64::*;

    use super::{A, B, QK};
    use crate::quant::rows::{check_dequantize, check_dot, dequantize_scalar};
    use crate::quant::x86::nibbles::{nibbles2_avx512, nibbles_avx2};
    use crate::quant::x86::q8::scale_min_products as scales;
    use crate::quant::x86::reduce::hsum256;

    /// `[d d_a, m s_a, d d_a, m s_a]` for block pair 0, then for block pair 1 (one conversion).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scales2(w0: *const u8, a0: *const u8, w1: *const u8, a1: *const u8) -> __m256 {
        // SAFETY: all four blocks start with four readable bytes.
        let h = unsafe { [w0, a0, w1, a1].map(|p| p.cast::<u32>().read_unaligned() as u64) };
        let v = _mm256_cvtph_ps(_mm_set_epi64x(
            (h[2] | h[3] << 32) as i64,
            (h[0] | h[1] << 32) as i64,
        ));
        _mm256_mul_ps(v, _mm256_permute_ps::<0b01_00_11_10>(v))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, A);
        // SAFETY: the rows hold `nb` blocks (checked above); the features are enabled here.
        unsafe { dot_avx2(nb, w.as_ptr(), a.as_ptr()) }
    }

    /// One accumulator, in block order: the same `f32` operations as the AVX2 tile kernel
    /// (`tile::half_avx2`), so a row's result does not depend on how many rows are batched.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_avx2(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = _mm_setzero_ps();
        for i in 0..nb {
            // SAFETY: block i < nb of both rows is in bounds.
            let (x, y, s) = unsafe {
                let (wb, ab) = (w.add(i * B), a.add(i * A));
                (
                    nibbles_avx2(wb.add(4)),
                    _mm256_loadu_si256(ab.add(4).cast()),
                    scales(wb, ab),
                )
            };
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
            let d = _mm256_broadcastss_ps(s);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc);
            acc_m = _mm_add_ps(acc_m, s);
        }
        let m = _mm_cvtss_f32(_mm_movehdup_ps(acc_m));
        hsum256(acc) + m
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, A);
        // SAFETY: the rows hold `nb` blocks (checked above); the features are enabled here.
        unsafe { dot_avx512(nb, w.as_ptr(), a.as_ptr()) }
    }

    /// Two blocks per step: weights unpacked by `nibbles2_avx512`, activations
    /// `[a0.qs | a1.qs]`; lanes line up with elements 0..32 of block 0, then of block 1.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot_avx512(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
        let mut acc = _mm512_setzero_ps();
        let mut acc_m = _mm256_setzero_ps();
        let mut i = 0;
        while i + 2 <= nb {
            // SAFETY: blocks i and i+1 < nb of both rows are in bounds.
            let (x, y, s) = unsafe {
                let (w0, a0) = (w.add(i * B), a.add(i * A));
                let (w1, a1) = (w0.add(B), a0.add(A));
                let x = nibbles2_avx512(w0.add(4), w1.add(4));
                let y0 = _mm256_loadu_si256(a0.add(4).cast());
                let y = _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(y0),
                    _mm256_loadu_si256(a1.add(4).cast()),
                );
                let s = scales2(w0, a0, w1, a1);
                (x, y, s)
            };
            let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, y);
            let d = _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(s));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc);
            acc_m = _mm256_add_ps(acc_m, s);
            i += 2;
        }
        let m = _mm256_movehdup_ps(acc_m);
        let m = _mm_cvtss_f32(_mm_add_ss(
            _mm256_castps256_ps128(m),
            _mm256_extractf128_ps::<1>(m),
        ));
        let mut sum = _mm512_reduce_add_ps(acc) + m;
        if i < nb {
            // SAFETY: block i < nb is in bounds; AVX2+FMA+F16C are among the enabled features.
            sum += unsafe { dot_avx2(1, w.add(i * B), a.add(i * A)) };
        }
        sum
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[u8], dst: &mut [f32]) {
        let nb = check_dequantize(src, dst, B, "Q4_1");
        // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
        // features are enabled here.
        unsafe { deq_avx2(nb, src.as_ptr(), dst.as_mut_ptr()) };
        dequantize_scalar::<super::Q4_1>(&src[nb * B..], &mut dst[nb * QK..]);
    }

    /// `q * d + m` as a multiply then an add (no FMA), bit-identical to the reference.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_avx2(nb: usize, src: *const u8, dst: *mut f32) {
        for i in 0..nb {
            // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
            unsafe {
                let b = src.add(i * B);
                let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(b.cast::<i32>().read_unaligned()));
                let d = _mm256_broadcastss_ps(dm);
                let m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
                let q = nibbles_avx2(b.add(4));
                let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                for (h, half) in halves.into_iter().enumerate() {
                    for (k, part) in [half, _mm_unpackhi_epi64(half, half)]
                        .into_iter()
                        .enumerate()
                    {
                        let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part));
                        let v = _mm256_add_ps(_mm256_mul_ps(f, d), m);
                        _mm256_storeu_ps(dst.add(i * QK + 16 * h + 8 * k), v);
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn dequantize_avx512(src: &[u8], dst: &mut [f32]) {
        let nb = check_dequantize(src, dst, B, "Q4_1");
        // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
        // features are enabled here.
        unsafe { deq_avx512(nb, src.as_ptr(), dst.as_mut_ptr()) };
        dequantize_scalar::<super::Q4_1>(&src[nb * B..], &mut dst[nb * QK..]);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn deq_avx512(nb: usize, src: *const u8, dst: *mut f32) {
        for i in 0..nb {
            // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
            unsafe {
                let b = src.add(i * B);
                let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(b.cast::<i32>().read_unaligned()));
                let d = _mm512_broadcastss_ps(dm);
                let m = _mm512_broadcastss_ps(_mm_movehdup_ps(dm));
                let q = _mm_loadu_si128(b.add(4).cast());
                let lo_hi = [
                    _mm_and_si128(q, _mm_set1_epi8(0x0F)),
                    _mm_and_si128(_mm_srli_epi16::<4>(q), _mm_set1_epi8(0x0F)),
                ];
                for (h, part) in lo_hi.into_iter().enumerate() {
                    let f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(part));
                    _mm512_storeu_ps(
                        dst.add(i * QK + 16 * h),
                        _mm512_add_ps(_mm512_mul_ps(f, d), m),
                    );
                }
            }
        }
    }

    pub(super) mod tile {
        //! 4 weight rows x 4 activation rows per call: each weight block is unpacked once and
        //! each activation block loaded once for the whole tile.
        //!
        //! Scales of 4 rows x 2 blocks are converted together. For rows `r` and blocks
        //! `i, i+1` the `f16` pairs `(d, m)` (or `(d_a, s_a)`) become 16 `f32` lanes:
        //!
        //! ```text
        //! lane: 4r+0    4r+1    4r+2      4r+3
        //!       d_r(i)  m_r(i)  d_r(i+1)  m_r(i+1)
        //! ```
        use std::arch::x86_64::*;

        use super::{dot_avx2, A, B};
        use crate::quant::x86::load::load_2x256;
        use crate::quant::x86::nibbles::{nibbles2_avx512, nibbles_avx2};
        use crate::quant::x86::reduce::hsum256;
        use crate::quant::x86::tile::{add_odd_block, from_halves, tile_rows};
        use crate::quant::x86::tile_scales::{spread_pair, Tile};
        use crate::quant::TILE;

        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub(crate) fn vec_dot_tile_avx512(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
            let (nb, w, a) = tile_rows(n, w, B, a, A);
            // SAFETY: every row holds `nb` blocks (checked by `tile_rows`); the features are
            // enabled here.
            let mut out = unsafe { tile_avx512(nb, w, a) };
            // SAFETY: block `i < nb` of both rows is in bounds; AVX2, FMA and F16C are enabled.
            add_odd_block(&mut out, nb, |r, j, i| unsafe {
                dot_avx2(1, w[r].add(i * B), a[j].add(i * A))
            });
            out
        }

        /// The 8 leading `u32`s (two `f16`s each) of blocks `i` and `i + 1` of 4 rows, as 16
        /// `f32` lanes laid out as in the module docs.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn pair_scales(rows: [*const u8; TILE], i: usize, block: usize) -> __m512 {
            // SAFETY: the caller guarantees blocks i and i+1 of every row are readable.
            let h = unsafe {
                rows.map(|p| {
                    let b = p.add(i * block);
                    let lo = b.cast::<u32>().read_unaligned() as i64;
                    let hi = b.add(block).cast::<u32>().read_unaligned() as i64;
                    lo | hi << 32
                })
            };
            _mm512_cvtph_ps(_mm256_setr_epi64x(h[0], h[1], h[2], h[3]))
        }

        /// Lanes `[k; 8] ++ [k + 2; 8]` of `v`.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        fn spread4(v: __m512, k: i32) -> __m512 {
            spread_pair(v, k, k + 2)
        }

        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn tile_avx512(nb: usize, w: [*const u8; TILE], a: [*const u8; TILE]) -> Tile {
            let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
            let mut acc_m = [_mm256_setzero_ps(); TILE];
            // Lanes 4r+1, 4r+3: [m_0(i), m_0(i+1), m_1(i), ...].
            let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
            let mut i = 0;
            while i + 2 <= nb {
                // SAFETY: blocks i and i+1 < nb of every row are in bounds.
                let (wq, ws, aq, as_) = unsafe {
                    (
                        w.map(|p| nibbles2_avx512(p.add(i * B + 4), p.add((i + 1) * B + 4))),
                        pair_scales(w, i, B),
                        a.map(|p| load_2x256(p.add(i * A + 4), p.add((i + 1) * A + 4))),
                        pair_scales(a, i, A),
                    )
                };
                let mins = _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, ws));
                let dw: [__m512; TILE] = std::array::from_fn(|r| spread4(ws, 4 * r as i32));
                for j in 0..TILE {
                    let s = 4 * j as i32 + 1;
                    let sa = _mm512_castps512_ps256(_mm512_permutexvar_ps(
                        _mm512_setr_epi32(
                            s,
                            s + 2,
                            s,
                            s + 2,
                            s,
                            s + 2,
                            s,
                            s + 2,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                        ),
                        as_,
                    ));
                    acc_m[j] = _mm256_fmadd_ps(mins, sa, acc_m[j]);
                    let da = spread4(as_, 4 * j as i32);
                    for r in 0..TILE {
                        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[r], aq[j]);
                        let d = _mm512_mul_ps(dw[r], da);
                        acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[j][r]);
                    }
                }
                i += 2;
            }
            let mut out = [[0.0; TILE]; TILE];
            for (j, o) in out.iter_mut().enumerate() {
                let m = lanes(acc_m[j]);
                for (r, v) in o.iter_mut().enumerate() {
                    *v = _mm512_reduce_add_ps(acc[j][r]) + (m[2 * r] + m[2 * r + 1]);
                }
            }
            out
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn vec_dot_tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
            let (nb, w, a) = tile_rows(n, w, B, a, A);
            // SAFETY: every row holds `nb` blocks (checked by `tile_rows`); the features are
            // enabled here.
            from_halves(a, |a| unsafe { half_avx2(nb, w, a) })
        }

        /// The 8 lanes of `v`.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn lanes(v: __m256) -> [f32; 8] {
            let mut m = [0.0f32; 8];
            // SAFETY: `m` holds 8 floats.
            unsafe { _mm256_storeu_ps(m.as_mut_ptr(), v) };
            m
        }

        /// 4 weight rows x 2 activation rows (AVX2 has 16 registers), one block per step.
        /// `ws` lanes `2r, 2r+1` = `(d_r, m_r)`; times `(d_a, s_a)` repeated they give
        /// `(d_r d_a, m_r s_a)`.
        ///
        /// # Safety
        /// The CPU has AVX2, FMA and F16C; every row holds `nb` blocks.
        // Not inlined: each tile makes two calls, and one body keeps the 16 AVX2 registers.
        #[inline(never)]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn half_avx2(
            nb: usize,
            w: [*const u8; TILE],
            a: [*const u8; 2],
        ) -> [[f32; TILE]; 2] {
            let mut acc = [[_mm256_setzero_ps(); TILE]; 2];
            let mut acc_m = [_mm256_setzero_ps(); 2];
            let ones = _mm256_set1_epi16(1);
            for i in 0..nb {
                // SAFETY: block i < nb of every row is in bounds.
                let (wq, ws, aq, as_) = unsafe {
                    let h = w.map(|p| p.add(i * B).cast::<i32>().read_unaligned());
                    let g = a.map(|p| p.add(i * A).cast::<i32>().read_unaligned());
                    (
                        w.map(|p| nibbles_avx2(p.add(i * B + 4))),
                        _mm256_cvtph_ps(_mm_setr_epi32(h[0], h[1], h[2], h[3])),
                        a.map(|p| _mm256_loadu_si256(p.add(i * A + 4).cast())),
                        g.map(|g| _mm256_cvtph_ps(_mm_set1_epi32(g))),
                    )
                };
                for j in 0..2 {
                    let dd = _mm256_mul_ps(ws, as_[j]);
                    acc_m[j] = _mm256_add_ps(acc_m[j], dd);
                    for r in 0..TILE {
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], aq[j]), ones);
                        let d = _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(2 * r as i32));
                        acc[j][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[j][r]);
                    }
                }
            }
            let mut out = [[0.0; TILE]; 2];
            for j in 0..2 {
                let mut m = [0.0f32; 8];
                // SAFETY: `m` holds 8 floats.
                unsafe { _mm256_storeu_ps(m.as_mut_ptr(), acc_m[j]) };
                for r in 0..TILE {
                    out[j][r] = hsum256(acc[j][r]) + m[2 * r + 1];
                }
            }
            out
        }
    }
}
