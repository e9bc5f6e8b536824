//! [`DType::Q5_0`]: blocks of 32 weights as 5-bit quants with one scale (22 bytes, 5.5 bits
//! per weight). Multiplied with [`ActFormat::Q8_0`] activations.
//!
//! ```text
//! BlockQ5_0 (22 bytes)
//! +--------+-------------+----------------------------------+
//! | d: f16 | qh: 4 bytes | qs[0] ...                 qs[15] |
//! +--------+-------------+----------------------------------+
//! qh (little-endian u32): bit j = bit 4 of element j's quant, j in 0..32
//! qs[j] = low 4 bits of element j | low 4 bits of element j + 16 << 4
//! x[j] = (q[j] - 16) * d,  q in 0..=31
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q4_0::signed_max;
use super::q8_0::{cast_blocks, check_dot, BlockQ8_0, KernelFns, QK};
use super::{ActFormat, DType, TypeKernels, VecDotTileFn};
use crate::cpu::Isa;

/// One Q5_0 block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bits, little-endian: bit `j` belongs to element `j`.
    pub qh: [u8; 4],
    /// Low four bits: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(DType::Q5_0.block_bytes() == 22);

const B: usize = 22;
const A: usize = 34;

/// Reference quantization (llama.cpp's `quantize_row_q5_0_ref`): `d = max / -16` where `max`
/// is the value of largest magnitude, `q = min(31, trunc(x / d + 16.5))`. `x.len()` must be
/// a multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ5_0> {
    assert!(
        x.len() % QK == 0,
        "Q5_0: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

fn quantize_block(x: &[f32]) -> BlockQ5_0 {
    let d = signed_max(x) / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |v: f32| ((v * id + 16.5) as i8).min(31) as u32;
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for (j, b) in qs.iter_mut().enumerate() {
        let (q0, q1) = (q(x[j]), q(x[j + QK / 2]));
        *b = (q0 & 0x0F | (q1 & 0x0F) << 4) as u8;
        qh |= (q0 >> 4) << j | (q1 >> 4) << (j + QK / 2);
    }
    BlockQ5_0 {
        d: f16::from_f32(d),
        qh: qh.to_le_bytes(),
        qs,
    }
}

/// Reference dequantization: `x = (q - 16) * d`.
pub fn dequantize_ref(blocks: &[BlockQ5_0], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "Q5_0 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let d = b.d.to_f32();
        for (j, q) in quants(b).into_iter().enumerate() {
            o[j] = (q - 16) as f32 * d;
        }
    }
}

/// The 32 quants (0..=31) of `b`, in element order.
fn quants(b: &BlockQ5_0) -> [i32; QK] {
    let qh = u32::from_le_bytes(b.qh);
    std::array::from_fn(|j| {
        let low = if j < QK / 2 {
            b.qs[j] & 0x0F
        } else {
            b.qs[j - QK / 2] >> 4
        };
        low as i32 | ((qh >> j & 1) << 4) as i32
    })
}

/// Reference dot product: per block `sum((q - 16) * a_q) * (d * d_a)`, summed in `f32`.
pub fn vec_dot_ref(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 = quants(x)
            .iter()
            .zip(&y.qs)
            .map(|(&q, &a)| (q - 16) * a as i32)
            .sum();
        sum += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sum
}

fn dequantize_scalar(src: &[u8], dst: &mut [f32]) {
    let nb = dst.len().div_ceil(QK);
    dequantize_ref(&cast_blocks(&src[..nb * B]), dst);
}

fn vec_dot_scalar(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = check_dot(n, w, B, a, A);
    vec_dot_ref(&cast_blocks(&w[..nb * B]), &cast_blocks(&a[..nb * A]))
}

/// The fastest Q5_0 kernels that `isa` (capped to what this CPU runs) allows.
pub fn kernels(isa: Isa) -> TypeKernels {
    let isa = isa.min(Isa::supported());
    let (dequantize, vec_dot): KernelFns = match isa {
        Isa::Scalar => (dequantize_scalar, vec_dot_scalar),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => (x86::dequantize_avx2, x86::vec_dot_avx2),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => (x86::dequantize_avx512, x86::vec_dot_avx512),
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("only Isa::Scalar is available off x86-64"),
    };
    let vec_dot_tile: Option<VecDotTileFn> = match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Some(x86::vec_dot_tile_avx2),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Some(x86::vec_dot_tile_avx512),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    };
    TypeKernels {
        dtype: DType::Q5_0,
        isa,
        act: ActFormat::Q8_0,
        dequantize,
        vec_dot,
        vec_dot_tile,
        vec_dot_rows: None,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 and AVX-512 VNNI Q5_0 x Q8_0 kernels, and 4 x 4 tiles built on Q4_0's offset-format
    //! tile cores. Pointers passed to the `unsafe fn`s address whole blocks (checked by the
    //! safe wrappers); loads are unaligned.
    use std::arch::x86_64::*;

    use super::super::q4_0::x86::tile::{half_avx2, tile_avx512, Tile};
    use super::super::q4_0::x86::{nibbles2_avx512, nibbles_avx2};
    use super::super::q8_0::check_tile;
    use super::super::q8_0::x86::{
        hsum256, load_2x256, mul_sum_i8_avx2, scale_product, scale_products2,
    };
    use super::super::TILE;
    use super::{check_dot, A, B, QK};

    /// The block's `qh` word.
    #[inline]
    unsafe fn qh(b: *const u8) -> u32 {
        // SAFETY: the caller guarantees a whole block at `b`; qh is bytes 2..6.
        u32::from_le(unsafe { b.add(2).cast::<u32>().read_unaligned() })
    }

    /// The block's 32 quants minus 16 (`-16..=15`) as signed bytes in element order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants_avx2(b: *const u8) -> __m256i {
        // SAFETY: the caller guarantees a whole block at `b`.
        let q = unsafe { quants_u_avx2(b) };
        _mm256_sub_epi8(q, _mm256_set1_epi8(16))
    }

    /// The block's 32 quants (`0..=31`) as bytes in element order. AVX2 has no bit-to-byte
    /// mask expansion: byte `k` takes qh byte `k / 8` (`pshufb`), sets every bit but `k % 8`,
    /// and compares with all-ones.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants_u_avx2(b: *const u8) -> __m256i {
        // SAFETY: the caller guarantees a whole block at `b`.
        let (low, qh) = unsafe { (nibbles_avx2(b.add(6)), qh(b)) };
        let spread = _mm256_set_epi64x(
            0x0303030303030303,
            0x0202020202020202,
            0x0101010101010101,
            0,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), spread);
        let bits = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
        let high = _mm256_and_si256(
            _mm256_cmpeq_epi8(bits, _mm256_set1_epi8(-1)),
            _mm256_set1_epi8(16),
        );
        _mm256_or_si256(low, high)
    }

    pub(super) fn vec_dot_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, A);
        // SAFETY: handed out only on CPUs with AVX2+FMA+F16C; the rows hold `nb` blocks.
        unsafe { dot_avx2(nb, w.as_ptr(), a.as_ptr()) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_avx2(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            // SAFETY: block i < nb of both rows is in bounds.
            let (x, y, d) = unsafe {
                let (wb, ab) = (w.add(i * B), a.add(i * A));
                (
                    quants_avx2(wb),
                    _mm256_loadu_si256(ab.add(2).cast()),
                    scale_product(wb, ab),
                )
            };
            let p = _mm256_cvtepi32_ps(mul_sum_i8_avx2(x, y));
            acc[i & 1] = _mm256_fmadd_ps(p, d, acc[i & 1]);
        }
        hsum256(_mm256_add_ps(acc[0], acc[1]))
    }

    pub(super) fn vec_dot_avx512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, A);
        // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL/VNNI (+AVX2, FMA, F16C); the
        // rows hold `nb` blocks.
        unsafe { dot_avx512(nb, w.as_ptr(), a.as_ptr()) }
    }

    /// Two blocks per step: the fifth bits are a 64-bit byte mask that adds 16 to the nibbles;
    /// then `sum(q * a) - sum(16 * a)`, both with `vpdpbusd`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot_avx512(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let sixteen = _mm512_set1_epi8(16);
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 2 <= nb {
            // SAFETY: blocks i and i+1 < nb of both rows are in bounds.
            let (x, y, d) = unsafe {
                let (w0, a0) = (w.add(i * B), a.add(i * A));
                let (w1, a1) = (w0.add(B), a0.add(A));
                (
                    quants2_avx512(w0, w1),
                    load_2x256(a0.add(2), a1.add(2)),
                    scale_products2(w0, a0, w1, a1),
                )
            };
            let zero = _mm512_setzero_si512();
            let p = _mm512_sub_epi32(
                _mm512_dpbusd_epi32(zero, x, y),
                _mm512_dpbusd_epi32(zero, sixteen, y),
            );
            let k = (i >> 1) & 1;
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[k]);
            i += 2;
        }
        let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
        if i < nb {
            // SAFETY: block i < nb is in bounds; AVX2+FMA+F16C are among the enabled features.
            sum += unsafe { dot_avx2(1, w.add(i * B), a.add(i * A)) };
        }
        sum
    }

    /// Quants (`0..=31`) of the blocks at `b0` and `b1`, elements 0..32 of each: the nibbles,
    /// plus 16 where the 64-bit byte mask of fifth bits is set.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn quants2_avx512(b0: *const u8, b1: *const u8) -> __m512i {
        // SAFETY: the caller guarantees whole blocks at `b0` and `b1`.
        let (x, hi) = unsafe {
            (
                nibbles2_avx512(b0.add(6), b1.add(6)),
                qh(b0) as u64 | (qh(b1) as u64) << 32,
            )
        };
        _mm512_mask_add_epi8(x, hi, x, _mm512_set1_epi8(16))
    }

    pub(super) fn vec_dot_tile_avx512(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
        let nb = check_tile(n, &w, B, &a, A);
        // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL/VNNI (+AVX2, FMA, F16C); every
        // row holds `nb` blocks (checked above).
        unsafe { tile_avx512_q5_0(nb, w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr)) }
    }

    /// The shared offset-format tile core with Q5_0 quants (offset 16), plus an odd last block.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn tile_avx512_q5_0(nb: usize, w: [*const u8; TILE], a: [*const u8; TILE]) -> Tile {
        // SAFETY: the closure reads only within the two blocks it is given.
        let unpack = |b0: *const u8, b1: *const u8| unsafe { quants2_avx512(b0, b1) };
        // SAFETY: the caller's guarantees are those of `tile_avx512`.
        let mut out = unsafe { tile_avx512(nb, w, a, B, 16, unpack) };
        if nb % 2 == 1 {
            let i = nb - 1;
            for (j, o) in out.iter_mut().enumerate() {
                for (r, v) in o.iter_mut().enumerate() {
                    // SAFETY: block i < nb of both rows is in bounds.
                    *v += unsafe { dot_avx2(1, w[r].add(i * B), a[j].add(i * A)) };
                }
            }
        }
        out
    }

    pub(super) fn vec_dot_tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
        let nb = check_tile(n, &w, B, &a, A);
        // SAFETY: handed out only on CPUs with AVX2+FMA+F16C; every row holds `nb` blocks.
        unsafe { tile_avx2_q5_0(nb, w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr)) }
    }

    /// Two calls of the shared AVX2 half-tile core with Q5_0 quants (offset 16).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_avx2_q5_0(nb: usize, w: [*const u8; TILE], a: [*const u8; TILE]) -> Tile {
        // SAFETY: the closure reads only within the block it is given.
        let unpack = |b: *const u8| unsafe { quants_u_avx2(b) };
        // SAFETY: the caller's guarantees are those of `half_avx2`.
        let (lo, hi) = unsafe {
            (
                half_avx2(nb, w, [a[0], a[1]], B, 16, unpack),
                half_avx2(nb, w, [a[2], a[3]], B, 16, unpack),
            )
        };
        [lo[0], lo[1], hi[0], hi[1]]
    }

    pub(super) fn dequantize_avx2(src: &[u8], dst: &mut [f32]) {
        let nb = dst.len() / QK;
        assert!(
            src.len() >= dst.len().div_ceil(QK) * B,
            "Q5_0 dequantize: too few blocks"
        );
        // SAFETY: handed out only on CPUs with AVX2; `src` holds `nb` blocks and `dst` `nb * 32`
        // elements (checked above).
        unsafe { deq_avx2(nb, src.as_ptr(), dst.as_mut_ptr()) };
        super::dequantize_scalar(&src[nb * B..], &mut dst[nb * QK..]);
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn deq_avx2(nb: usize, src: *const u8, dst: *mut f32) {
        for i in 0..nb {
            // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
            unsafe {
                let b = src.add(i * B);
                let d = _mm_cvtph_ps(_mm_cvtsi32_si128(b.cast::<u16>().read_unaligned() as i32));
                let d = _mm256_broadcastss_ps(d);
                let q = quants_avx2(b);
                let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                for (h, half) in halves.into_iter().enumerate() {
                    for (k, part) in [half, _mm_unpackhi_epi64(half, half)]
                        .into_iter()
                        .enumerate()
                    {
                        let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
                        _mm256_storeu_ps(dst.add(i * QK + 16 * h + 8 * k), _mm256_mul_ps(f, d));
                    }
                }
            }
        }
    }

    pub(super) fn dequantize_avx512(src: &[u8], dst: &mut [f32]) {
        let nb = dst.len() / QK;
        assert!(
            src.len() >= dst.len().div_ceil(QK) * B,
            "Q5_0 dequantize: too few blocks"
        );
        // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL; `src` holds `nb` blocks and
        // `dst` `nb * 32` elements (checked above).
        unsafe { deq_avx512(nb, src.as_ptr(), dst.as_mut_ptr()) };
        super::dequantize_scalar(&src[nb * B..], &mut dst[nb * QK..]);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn deq_avx512(nb: usize, src: *const u8, dst: *mut f32) {
        for i in 0..nb {
            // SAFETY: block i of `src` and elements 32i..32i+32 of `dst` are in bounds.
            unsafe {
                let b = src.add(i * B);
                let d = _mm_cvtph_ps(_mm_cvtsi32_si128(b.cast::<u16>().read_unaligned() as i32));
                let d = _mm512_broadcastss_ps(d);
                let low = nibbles_avx2(b.add(6));
                let q = _mm256_mask_add_epi8(low, qh(b), low, _mm256_set1_epi8(16));
                let q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
                let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                for (h, half) in halves.into_iter().enumerate() {
                    let f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(half));
                    _mm512_storeu_ps(dst.add(i * QK + 16 * h), _mm512_mul_ps(f, d));
                }
            }
        }
    }
}
