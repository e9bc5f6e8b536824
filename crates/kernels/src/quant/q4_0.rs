//! [`DType::Q4_0`]: blocks of 32 weights as 4-bit quants with one scale (18 bytes, 4.5 bits
//! per weight). Multiplied with [`ActFormat::Q8_0`] activations.
//!
//! ```text
//! BlockQ4_0 (18 bytes)
//! +--------+----------------------------------------------+
//! | d: f16 | qs[0] qs[1] ...                       qs[15] |
//! +--------+----------------------------------------------+
//! qs[j] = x[j] quant in the low nibble | x[j + 16] quant in the high nibble << 4
//! x[j] = (q[j] - 8) * d,  q in 0..=15
//! ```
//!
//! The x86 kernels are built on the offset-format cores shared with Q5_0
//! ([`crate::quant::x86::signed_rows`], [`crate::quant::x86::offset_tile`]).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::dispatch::{select_variant, Variant};
use super::format::quant_format;
use super::q8_0::BlockQ8_0;
use super::rows::{scalar_variant, QK};
use super::{ActFormat, DType, TypeKernels, VecDotRowsFn};
use crate::cpu::Isa;

/// One Q4_0 block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Packed quants: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(DType::Q4_0.block_bytes() == 18);

const B: usize = 18;
const A: usize = 34;

quant_format!(
    /// The [`QuantFormat`](super::format::QuantFormat) of [`DType::Q4_0`].
    Q4_0 { block: BlockQ4_0, act: BlockQ8_0, dtype: DType::Q4_0, act_format: ActFormat::Q8_0, quantize_act: super::act::quantize_q8_0_ref }
);

/// Reference quantization (llama.cpp's `quantize_row_q4_0_ref`): `d = max / -8` where `max`
/// is the value of largest magnitude, `q = min(15, trunc(x / d + 8.5))`. `x.len()` must be a
/// multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ4_0> {
    assert!(
        x.len().is_multiple_of(QK),
        "Q4_0: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

/// The value of largest magnitude in `x` (the first one on ties), or 0.
pub(crate) fn signed_max(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn quantize_block(x: &[f32]) -> BlockQ4_0 {
    let d = signed_max(x) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    let mut qs = [0u8; QK / 2];
    for (j, b) in qs.iter_mut().enumerate() {
        *b = q(x[j]) | q(x[j + QK / 2]) << 4;
    }
    BlockQ4_0 {
        d: f16::from_f32(d),
        qs,
    }
}

/// Reference dequantization: `x = (q - 8) * d`.
pub fn dequantize_ref(blocks: &[BlockQ4_0], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "Q4_0 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let d = b.d.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            o[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            o[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// Reference dot product: per block `sum((q - 8) * a_q) * (d * d_a)`, summed in `f32`.
pub fn vec_dot_ref(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for (j, &q) in x.qs.iter().enumerate() {
            sumi += ((q & 0x0F) as i32 - 8) * y.qs[j] as i32;
            sumi += ((q >> 4) as i32 - 8) * y.qs[j + QK / 2] as i32;
        }
        sum += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sum
}

/// The fastest Q4_0 kernels that `isa` (capped to what this CPU runs) allows.
pub fn kernels(isa: Isa) -> TypeKernels {
    variant(isa).kernels(DType::Q4_0, ActFormat::Q8_0)
}

/// The m = 1 kernel `isa` allows: `[vec_dot(n, w[r], a); 4]` for 4 weight rows and one
/// activation row, each activation block loaded once for the 4 rows (AVX-512 VNNI only).
pub fn vec_dot_rows(isa: Isa) -> Option<VecDotRowsFn> {
    variant(isa).vec_dot_rows
}

fn variant(isa: Isa) -> Variant {
    select_variant!(isa,
        scalar: scalar_variant::<Q4_0>(),
        avx2: {
            dequantize: x86::dequantize_avx2,
            vec_dot: x86::vec_dot_avx2,
            vec_dot_tile: x86::vec_dot_tile_avx2,
        },
        avx512: {
            dequantize: x86::dequantize_avx512,
            vec_dot: x86::vec_dot_avx512,
            vec_dot_tile: x86::vec_dot_tile_avx512,
            vec_dot_rows: x86::vec_dot_rows_avx512,
        },
    )
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! AVX2 and AVX-512 VNNI Q4_0 x Q8_0 kernels: the offset-format cores with nibbles minus
    //! 8. The entry points are safe `#[target_feature]` functions of byte rows; the
    //! raw-pointer cores they call address whole blocks (checked by the entry points).
    use std::arch::x86_64::*;

    use super::{A, B, QK};
    use crate::quant::TILE;
    use crate::quant::rows::{check_dequantize, dequantize_scalar, check_dot, check_tile};
    use crate::quant::x86::load::load_2x256;
    use crate::quant::x86::nibbles::{nibbles2_avx512, nibbles_avx2};
    use crate::quant::x86::offset_tile::{half_avx2, tile_avx512};
    use crate::quant::x86::q8::{prefetch, PREFETCH_AHEAD};
    use crate::quant::x86::signed_rows;
    use crate::quant::x86::tile_scales::{act_pair_scales, pair_scales, spread, Tile};

    /// The block's 32 quants minus 8, as signed bytes in element order.
    ///
    /// # Safety
    /// A whole block is readable at `b`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants_avx2(b: *const u8) -> __m256i {
        // SAFETY: the caller guarantees a whole block at `b`; the quants are bytes 2..18.
        _mm256_sub_epi8(unsafe { nibbles_avx2(b.add(2)) }, _mm256_set1_epi8(8))
    }

    /// The unsigned quants (elements 0..32) of the blocks at `b0` and `b1`.
    ///
    /// # Safety
    /// Whole blocks are readable at `b0` and `b1`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn quants2_avx512(b0: *const u8, b1: *const u8) -> __m512i {
        // SAFETY: the caller guarantees whole blocks at `b0` and `b1`.
        unsafe { nibbles2_avx512(b0.add(2), b1.add(2)) }
    }

    /// # Safety
    /// The CPU has AVX2, FMA and F16C; the rows hold `nb` blocks.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_avx2(nb: usize, w: *const u8, a: *const u8) -> f32 {
        // SAFETY: the caller's guarantees; the closure reads only within its block.
        unsafe { signed_rows::dot_avx2(nb, w, a, B, |b| quants_avx2(b)) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, A);
        // SAFETY: the rows hold `nb` blocks (checked above); the features are enabled here.
        unsafe { dot_avx2(nb, w.as_ptr(), a.as_ptr()) }
    }

    /// Two blocks per step: `sum(q * a) - sum(8 * a)`, both with `vpdpbusd`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_avx512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, A);
        let (w, a) = (w.as_ptr(), a.as_ptr());
        // SAFETY: the rows hold `nb` blocks (checked above); the features are enabled here;
        // the closures read only within the blocks they are given.
        unsafe {
            signed_rows::offset_dot_avx512::<true, _, _>(
                (nb, w, a),
                (B, 8),
                |b0, b1| quants2_avx512(b0, b1),
                |i| dot_avx2(1, w.add(i * B), a.add(i * A)),
            )
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_rows_avx512(n: usize, w: [&[u8]; TILE], a: &[u8]) -> [f32; TILE] {
        let nb = check_tile(n, &w, B, &[a; TILE], A);
        // SAFETY: every row holds `nb` blocks (checked above); the features are enabled here.
        unsafe { rows_avx512(nb, w.map(<[u8]>::as_ptr), a.as_ptr()) }
    }

    /// 4 weight rows, two blocks per step: the activation quants, their scales and the
    /// `sum(8 * a)` correction are loaded or computed once for the 4 rows.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn rows_avx512(nb: usize, w: [*const u8; TILE], a: *const u8) -> [f32; TILE] {
        let eight = _mm512_set1_epi8(8);
        let mut acc = [_mm512_setzero_ps(); TILE];
        let mut i = 0;
        while i + 2 <= nb {
            for p in w {
                prefetch(p.wrapping_add(i * B + PREFETCH_AHEAD));
            }
            // SAFETY: blocks i and i+1 < nb of every row are in bounds.
            let (x, ws, y, da) = unsafe {
                (
                    w.map(|p| nibbles2_avx512(p.add(i * B + 2), p.add((i + 1) * B + 2))),
                    pair_scales(w, i, B),
                    load_2x256(a.add(i * A + 2), a.add((i + 1) * A + 2)),
                    act_pair_scales(a, i, A),
                )
            };
            let zero = _mm512_setzero_si512();
            let init = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, eight, y));
            let d = _mm512_mul_ps(ws, da);
            for r in 0..TILE {
                let p = _mm512_dpbusd_epi32(init, x[r], y);
                let dr = spread(d, 2 * r as i32);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dr, acc[r]);
            }
            i += 2;
        }
        let mut out = [0.0; TILE];
        for r in 0..TILE {
            out[r] = _mm512_reduce_add_ps(acc[r]);
            if i < nb {
                // SAFETY: block i < nb of both rows is in bounds; AVX2+FMA+F16C are enabled.
                out[r] += unsafe { dot_avx2(1, w[r].add(i * B), a.add(i * A)) };
            }
        }
        out
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dequantize_avx2(src: &[u8], dst: &mut [f32]) {
        let nb = check_dequantize(src, dst, B, "Q4_0");
        // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
        // features are enabled here; the closure reads only within its block.
        unsafe {
            signed_rows::dequantize_avx2(nb, src.as_ptr(), dst.as_mut_ptr(), B, |b| quants_avx2(b))
        };
        dequantize_scalar::<super::Q4_0>(&src[nb * B..], &mut dst[nb * QK..]);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn dequantize_avx512(src: &[u8], dst: &mut [f32]) {
        let nb = check_dequantize(src, dst, B, "Q4_0");
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        // SAFETY: `src` holds `nb` blocks and `dst` `nb * 32` elements (checked above); the
        // features are enabled here; the closure reads only within its block.
        unsafe { signed_rows::dequantize_avx512(nb, s, d, B, |b| quants_avx2(b)) };
        dequantize_scalar::<super::Q4_0>(&src[nb * B..], &mut dst[nb * QK..]);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn vec_dot_tile_avx512(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
        let nb = check_tile(n, &w, B, &a, A);
        // SAFETY: every row holds `nb` blocks (checked above); the features are enabled here.
        unsafe { q4_0_avx512(nb, w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr)) }
    }

    /// [`tile_avx512`] with Q4_0 nibbles (offset 8), plus an odd last block.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn q4_0_avx512(nb: usize, w: [*const u8; TILE], a: [*const u8; TILE]) -> Tile {
        // SAFETY: the closure reads the 16 quant bytes of the two blocks it is given.
        let unpack =
            |b0: *const u8, b1: *const u8| unsafe { nibbles2_avx512(b0.add(2), b1.add(2)) };
        // SAFETY: the caller's guarantees are those of `tile_avx512`.
        let mut out = unsafe { tile_avx512(nb, w, a, B, 8, unpack) };
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

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn vec_dot_tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
        let nb = check_tile(n, &w, B, &a, A);
        // SAFETY: every row holds `nb` blocks (checked above); the features are enabled here.
        unsafe { q4_0_avx2(nb, w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr)) }
    }

    /// Two [`half_avx2`] calls with Q4_0 nibbles (offset 8).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_0_avx2(nb: usize, w: [*const u8; TILE], a: [*const u8; TILE]) -> Tile {
        // SAFETY: the closure reads the 16 quant bytes of the block it is given.
        let unpack = |b: *const u8| unsafe { nibbles_avx2(b.add(2)) };
        // SAFETY: the caller's guarantees are those of `half_avx2`.
        let (lo, hi) = unsafe {
            (
                half_avx2(nb, w, [a[0], a[1]], B, 8, unpack),
                half_avx2(nb, w, [a[2], a[3]], B, 8, unpack),
            )
        };
        [lo[0], lo[1], hi[0], hi[1]]
    }
}
