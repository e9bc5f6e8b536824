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
//! This file also holds the nibble unpacking that Q4_1 and Q5_0 share, and the 4 x 4 tile
//! cores (`x86::tile`) that Q4_0 and Q5_0 share.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_0::{cast_blocks, check_dot, BlockQ8_0, KernelFns, QK};
use super::{ActFormat, DType, TypeKernels, VecDotTileFn, TILE};
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

/// Reference quantization (llama.cpp's `quantize_row_q4_0_ref`): `d = max / -8` where `max`
/// is the value of largest magnitude, `q = min(15, trunc(x / d + 8.5))`. `x.len()` must be a
/// multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ4_0> {
    assert!(
        x.len() % QK == 0,
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

fn dequantize_scalar(src: &[u8], dst: &mut [f32]) {
    let nb = dst.len().div_ceil(QK);
    dequantize_ref(&cast_blocks(&src[..nb * B]), dst);
}

fn vec_dot_scalar(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = check_dot(n, w, B, a, A);
    vec_dot_ref(&cast_blocks(&w[..nb * B]), &cast_blocks(&a[..nb * A]))
}

/// The fastest Q4_0 kernels that `isa` (capped to what this CPU runs) allows.
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
        Isa::Avx2 => Some(x86::tile::vec_dot_tile_avx2),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Some(x86::tile::vec_dot_tile_avx512),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    };
    TypeKernels {
        dtype: DType::Q4_0,
        isa,
        act: ActFormat::Q8_0,
        dequantize,
        vec_dot,
        vec_dot_tile,
        vec_dot_rows: vec_dot_rows(isa),
    }
}

/// The m = 1 kernel `isa` allows: `[vec_dot(n, w[r], a); 4]` for 4 weight rows and one
/// activation row, each activation block loaded once for the 4 rows (AVX-512 VNNI only).
pub fn vec_dot_rows(isa: Isa) -> Option<fn(usize, [&[u8]; TILE], &[u8]) -> [f32; TILE]> {
    match isa.min(Isa::supported()) {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => Some(x86::vec_dot_rows_avx512),
        _ => None,
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    //! AVX2 and AVX-512 VNNI Q4_0 x Q8_0 kernels, and nibble unpacking shared with Q4_1 and
    //! Q5_0. Pointers passed to the `unsafe fn`s address whole blocks (checked by the safe
    //! wrappers); loads are unaligned.
    use std::arch::x86_64::*;

    use super::super::q8_0::x86::tile::{act_pair_scales, pair_scales, spread};
    use super::super::q8_0::x86::{
        hsum256, load_2x256, mul_sum_i8_avx2, prefetch, scale_product, scale_products2,
        PREFETCH_AHEAD,
    };
    use super::{check_dot, A, B, QK, TILE};

    /// The 32 quants packed in the 16 bytes at `qs`, as bytes 0..=15 in element order:
    /// `[qs & 0x0F | qs >> 4 & 0x0F]`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn nibbles_avx2(qs: *const u8) -> __m256i {
        // SAFETY: the caller guarantees 16 readable bytes at `qs`.
        let q = unsafe { _mm_loadu_si128(qs.cast()) };
        let both = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(q), _mm_srli_epi16::<4>(q));
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }

    /// Two blocks' quants (16 packed bytes at `qs0` and at `qs1`) as 64 bytes 0..=15:
    /// `[qs0 & 0x0F | qs0 >> 4 | qs1 & 0x0F | qs1 >> 4]`, i.e. elements 0..32 of each block.
    /// Built from two 16-byte broadcasts and one variable shift per 64-bit lane.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(crate) unsafe fn nibbles2_avx512(qs0: *const u8, qs1: *const u8) -> __m512i {
        // SAFETY: the caller guarantees 16 readable bytes at `qs0` and at `qs1`.
        let (q0, q1) = unsafe {
            let q0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs0.cast()));
            (q0, _mm256_broadcastsi128_si256(_mm_loadu_si128(qs1.cast())))
        };
        let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q0), q1);
        let shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
        _mm512_and_si512(_mm512_srlv_epi64(q, shift), _mm512_set1_epi8(0x0F))
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
                    nibbles_avx2(wb.add(2)),
                    _mm256_loadu_si256(ab.add(2).cast()),
                    scale_product(wb, ab),
                )
            };
            let x = _mm256_sub_epi8(x, _mm256_set1_epi8(8));
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

    /// Two blocks per step: `sum(q * a) - sum(8 * a)`, both with `vpdpbusd`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot_avx512(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let eight = _mm512_set1_epi8(8);
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 2 <= nb {
            prefetch(w.wrapping_add(i * B + PREFETCH_AHEAD));
            // SAFETY: blocks i and i+1 < nb of both rows are in bounds.
            let (x, y, d) = unsafe {
                let (w0, a0) = (w.add(i * B), a.add(i * A));
                let (w1, a1) = (w0.add(B), a0.add(A));
                let x = nibbles2_avx512(w0.add(2), w1.add(2));
                (
                    x,
                    load_2x256(a0.add(2), a1.add(2)),
                    scale_products2(w0, a0, w1, a1),
                )
            };
            let zero = _mm512_setzero_si512();
            let p = _mm512_sub_epi32(
                _mm512_dpbusd_epi32(zero, x, y),
                _mm512_dpbusd_epi32(zero, eight, y),
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

    pub(super) fn vec_dot_rows_avx512(n: usize, w: [&[u8]; TILE], a: &[u8]) -> [f32; TILE] {
        let nb = check_dot(n, w[0], B, a, A);
        for r in &w[1..] {
            check_dot(n, r, B, a, A);
        }
        // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL/VNNI (+AVX2, FMA, F16C); every
        // row holds `nb` blocks (checked above).
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

    pub(super) fn dequantize_avx2(src: &[u8], dst: &mut [f32]) {
        let nb = dst.len() / QK;
        assert!(
            src.len() >= dst.len().div_ceil(QK) * B,
            "Q4_0 dequantize: too few blocks"
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
                let q = _mm256_sub_epi8(nibbles_avx2(b.add(2)), _mm256_set1_epi8(8));
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
            "Q4_0 dequantize: too few blocks"
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
                let q = _mm256_sub_epi8(nibbles_avx2(b.add(2)), _mm256_set1_epi8(8));
                let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                for (h, half) in halves.into_iter().enumerate() {
                    let f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(half));
                    _mm512_storeu_ps(dst.add(i * QK + 16 * h), _mm512_mul_ps(f, d));
                }
            }
        }
    }

    pub(crate) mod tile {
        //! 4 weight rows x 4 activation rows per call for the "offset" formats, Q4_0 and Q5_0:
        //! `x = (q - o) d` with unsigned quants `q` and a fixed offset `o` (8, 16). Each weight
        //! block is unpacked once and each activation block loaded once for the whole tile.
        //!
        //! `sum((q - o) a) = sum(q a) - sum(o a)`: `q` is unsigned, so `vpdpbusd` (AVX-512
        //! VNNI) and `maddubs` (AVX2) take it as is, and the correction `sum(o a)` depends on
        //! the activation row only, so it is computed once per activation block, not once per
        //! (row, activation) pair. Both sums are exact in `i32` (AVX2: `maddubs` pairs stay
        //! within `i16`, `2 * 31 * 127 < 2^15`, activation bytes never being -128).
        //!
        //! The format supplies an unpacking closure; the cores are generic over it so that it
        //! inlines into the loop.
        use std::arch::x86_64::*;

        use super::super::super::q8_0::check_tile;
        use super::super::super::q8_0::x86::tile::{pair_scales, spread};
        use super::super::super::q8_0::x86::{hsum256, load_2x256};
        use super::super::super::TILE;
        use super::{dot_avx2, nibbles2_avx512, nibbles_avx2, A, B};

        /// `out[j][r]`: weight row `r` times activation row `j`.
        pub(crate) type Tile = [[f32; TILE]; TILE];

        pub(crate) fn vec_dot_tile_avx512(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
            let nb = check_tile(n, &w, B, &a, A);
            // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL/VNNI (+AVX2, FMA, F16C);
            // every row holds `nb` blocks (checked above).
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

        /// The tile over the first `nb / 2 * 2` blocks (the caller adds an odd last block),
        /// two blocks per step. `unpack(block_i, block_i+1)` returns the unsigned quants of
        /// the two `block`-byte weight blocks (elements 0..32 of each, in order), which start
        /// with their `f16` scale; weights are `(q - offset) d`.
        ///
        /// # Safety
        /// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; every weight row holds `nb`
        /// blocks of `block` bytes and every activation row `nb` Q8_0 blocks; `unpack` reads
        /// only within the two blocks it is given.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub(crate) unsafe fn tile_avx512<U>(
            nb: usize,
            w: [*const u8; TILE],
            a: [*const u8; TILE],
            block: usize,
            offset: i8,
            unpack: U,
        ) -> Tile
        where
            U: Fn(*const u8, *const u8) -> __m512i,
        {
            let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
            let o = _mm512_set1_epi8(offset);
            let mut i = 0;
            while i + 2 <= nb {
                // SAFETY: blocks i and i+1 < nb of every row are in bounds.
                let (wq, ws, aq, as_) = unsafe {
                    (
                        w.map(|p| unpack(p.add(i * block), p.add((i + 1) * block))),
                        pair_scales(w, i, block),
                        a.map(|p| load_2x256(p.add(i * A + 2), p.add((i + 1) * A + 2))),
                        pair_scales(a, i, A),
                    )
                };
                let dw: [__m512; TILE] = std::array::from_fn(|r| spread(ws, 2 * r as i32));
                for j in 0..TILE {
                    let zero = _mm512_setzero_si512();
                    let init = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, o, aq[j]));
                    let da = spread(as_, 2 * j as i32);
                    for r in 0..TILE {
                        let p = _mm512_dpbusd_epi32(init, wq[r], aq[j]);
                        let d = _mm512_mul_ps(dw[r], da);
                        acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[j][r]);
                    }
                }
                i += 2;
            }
            acc.map(|row| row.map(|v| _mm512_reduce_add_ps(v)))
        }

        pub(crate) fn vec_dot_tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
            let nb = check_tile(n, &w, B, &a, A);
            // SAFETY: handed out only on CPUs with AVX2+FMA+F16C; every row holds `nb` blocks.
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

        /// 4 weight rows x 2 activation rows (AVX2 has 16 registers), one block per step.
        /// `unpack(block)` returns the 32 unsigned quants of a `block`-byte weight block that
        /// starts with its `f16` scale; weights are `(q - offset) d`. The `i16` pair sums of
        /// `maddubs(q, a) - maddubs(offset, a)` are exact (see the module docs).
        ///
        /// # Safety
        /// The CPU has AVX2, FMA and F16C; every weight row holds `nb` blocks of `block` bytes
        /// and every activation row `nb` Q8_0 blocks; `unpack` reads only within its block.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn half_avx2<U>(
            nb: usize,
            w: [*const u8; TILE],
            a: [*const u8; 2],
            block: usize,
            offset: i8,
            unpack: U,
        ) -> [[f32; TILE]; 2]
        where
            U: Fn(*const u8) -> __m256i,
        {
            let mut acc = [[_mm256_setzero_ps(); TILE]; 2];
            let (o, ones) = (_mm256_set1_epi8(offset), _mm256_set1_epi16(1));
            for i in 0..nb {
                // SAFETY: block i < nb of every row is in bounds.
                let (wq, ws, aq, as_) = unsafe {
                    let h = w.map(|p| p.add(i * block).cast::<u16>().read_unaligned() as i16);
                    let g = a.map(|p| p.add(i * A).cast::<u16>().read_unaligned() as i16);
                    (
                        w.map(|p| unpack(p.add(i * block))),
                        _mm_cvtph_ps(_mm_setr_epi16(h[0], h[1], h[2], h[3], 0, 0, 0, 0)),
                        a.map(|p| _mm256_loadu_si256(p.add(i * A + 2).cast())),
                        _mm_cvtph_ps(_mm_setr_epi16(g[0], g[1], 0, 0, 0, 0, 0, 0)),
                    )
                };
                for j in 0..2 {
                    let corr = _mm256_maddubs_epi16(o, aq[j]);
                    let dd = _mm256_castps128_ps256(_mm_mul_ps(
                        ws,
                        _mm_permutevar_ps(as_, _mm_set1_epi32(j as i32)),
                    ));
                    for r in 0..TILE {
                        let p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(wq[r], aq[j]), corr);
                        let p = _mm256_madd_epi16(p16, ones);
                        let d = _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(r as i32));
                        acc[j][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[j][r]);
                    }
                }
            }
            acc.map(|row| row.map(|v| hsum256(v)))
        }
    }
}
