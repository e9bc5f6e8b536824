//! [`DType::Q8_0`]: blocks of 32 weights, one `f16` scale and 32 signed bytes (34 bytes).
//!
//! ```text
//! BlockQ8_0 (34 bytes)
//! +--------+---------------------------------+
//! | d: f16 | qs[0] qs[1] ...          qs[31] |   x[j] = qs[j] * d
//! +--------+---------------------------------+
//! ```
//!
//! The same block is the [`ActFormat::Q8_0`] activation format that Q4_0, Q5_0 and Q8_0
//! weights are multiplied with, so this file also holds the x86 helpers those dot products
//! share (signed byte products, per-block scale products).

use std::borrow::Cow;

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::{ActFormat, DType, TypeKernels, VecDotTileFn, TILE};
use crate::cpu::Isa;

/// Elements per block.
pub const QK: usize = 32;

/// One Q8_0 block (weights or activations).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quants: `x[j] = qs[j] * d`.
    pub qs: [i8; QK],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(DType::Q8_0.block_bytes() == 34 && ActFormat::Q8_0.block_bytes() == 34);

/// A `(dequantize, vec_dot)` pair, as stored in [`TypeKernels`].
pub(crate) type KernelFns = (fn(&[u8], &mut [f32]), fn(usize, &[u8], &[u8]) -> f32);

/// View `bytes` as blocks of `T`, copying only if they are not suitably aligned.
pub(crate) fn cast_blocks<T: Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(blocks) => Cow::Borrowed(blocks),
        Err(_) => {
            let mut v = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
            let len = v.len() * std::mem::size_of::<T>();
            bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&bytes[..len]);
            Cow::Owned(v)
        }
    }
}

/// Check a dot product's arguments: `n` whole blocks and rows long enough for them.
/// Returns the block count. The SIMD kernels rely on this for memory safety.
pub(crate) fn check_dot(n: usize, w: &[u8], w_block: usize, a: &[u8], a_block: usize) -> usize {
    assert!(n % QK == 0, "vec_dot: n = {n} is not a multiple of {QK}");
    let nb = n / QK;
    assert!(
        w.len() >= nb * w_block,
        "vec_dot: weight row shorter than n"
    );
    assert!(
        a.len() >= nb * a_block,
        "vec_dot: activation row shorter than n"
    );
    nb
}

/// [`check_dot`] for every (weight row, activation row) pair of a tile; returns the block
/// count. The SIMD tile kernels rely on this for memory safety.
pub(crate) fn check_tile(
    n: usize,
    w: &[&[u8]; TILE],
    w_block: usize,
    a: &[&[u8]; TILE],
    a_block: usize,
) -> usize {
    let nb = check_dot(n, w[0], w_block, a[0], a_block);
    for (wr, ar) in w.iter().zip(a) {
        check_dot(n, wr, w_block, ar, a_block);
    }
    nb
}

/// Reference quantization (llama.cpp's `quantize_row_q8_0_ref`): `d = amax / 127`,
/// `qs = round(x / d)` with ties away from zero. `x.len()` must be a multiple of 32.
pub fn quantize_ref(x: &[f32]) -> Vec<BlockQ8_0> {
    assert!(
        x.len() % QK == 0,
        "Q8_0: length {} is not a multiple of {QK}",
        x.len()
    );
    x.chunks_exact(QK).map(quantize_block).collect()
}

/// Quantizes one block of 32 values (the reference rounding).
pub(crate) fn quantize_block(x: &[f32]) -> BlockQ8_0 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    BlockQ8_0 {
        d: f16::from_f32(d),
        qs,
    }
}

/// Reference dequantization: `out[32*i + j] = qs[j] * d`.
pub fn dequantize_ref(blocks: &[BlockQ8_0], out: &mut [f32]) {
    assert!(
        out.len() <= blocks.len() * QK,
        "Q8_0 dequantize: too few blocks"
    );
    for (b, o) in blocks.iter().zip(out.chunks_mut(QK)) {
        let d = b.d.to_f32();
        for (q, y) in b.qs.iter().zip(o.iter_mut()) {
            *y = *q as f32 * d;
        }
    }
}

/// Reference dot product: per block the exact integer sum, scaled by `d_w * d_a`, summed in
/// `f32` in block order.
pub fn vec_dot_ref(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 =
            x.qs.iter()
                .zip(&y.qs)
                .map(|(&p, &q)| p as i32 * q as i32)
                .sum();
        sum += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sum
}

fn dequantize_scalar(src: &[u8], dst: &mut [f32]) {
    let nb = dst.len().div_ceil(QK);
    dequantize_ref(&cast_blocks(&src[..nb * 34]), dst);
}

fn vec_dot_scalar(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = check_dot(n, w, 34, a, 34);
    vec_dot_ref(&cast_blocks(&w[..nb * 34]), &cast_blocks(&a[..nb * 34]))
}

/// The fastest Q8_0 kernels that `isa` (capped to what this CPU runs) allows.
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
        dtype: DType::Q8_0,
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
        Isa::Avx512Vnni => Some(x86::tile::vec_dot_rows_avx512),
        _ => None,
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    //! AVX2 and AVX-512 VNNI Q8_0 kernels, and helpers shared by every format that pairs
    //! with Q8_0 activations. Pointers passed to the `unsafe fn`s point at whole blocks
    //! (checked by the safe wrappers); loads are unaligned.
    //!
    //! The signed x signed byte products use `|w| * sign(a, w)`; this is exact for every weight
    //! byte and for activation bytes in `-127..=127`, which the activation quantizer guarantees
    //! (`round(x / (amax / 127))` never reaches -128).
    use std::arch::x86_64::*;

    use super::{check_dot, QK};

    const B: usize = 34;

    /// `d_w * d_a` of a weight block at `w` and an activation block at `a` (both start with
    /// an `f16` scale), broadcast to 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn scale_product(w: *const u8, a: *const u8) -> __m256 {
        // SAFETY: both pointers address blocks that start with two readable scale bytes.
        let (dw, da) = unsafe {
            (
                w.cast::<u16>().read_unaligned(),
                a.cast::<u16>().read_unaligned(),
            )
        };
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128((dw as u32 | (da as u32) << 16) as i32));
        _mm256_broadcastss_ps(_mm_mul_ss(v, _mm_movehdup_ps(v)))
    }

    /// `[d_w0 * d_a0; 8] ++ [d_w1 * d_a1; 8]` for two weight/activation block pairs.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(crate) unsafe fn scale_products2(
        w0: *const u8,
        a0: *const u8,
        w1: *const u8,
        a1: *const u8,
    ) -> __m512 {
        // SAFETY: all four pointers address blocks that start with two readable scale bytes.
        let s = unsafe { [w0, a0, w1, a1].map(|p| p.cast::<u16>().read_unaligned() as u64) };
        let bits = s[0] | s[1] << 16 | s[2] << 32 | s[3] << 48;
        let v = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
        let p = _mm_mul_ps(v, _mm_movehdup_ps(v));
        let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
        _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p))
    }

    /// Per-lane sums of signed byte products `x * y` (8 x i32), AVX2 `maddubs` based.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn mul_sum_i8_avx2(x: __m256i, y: __m256i) -> __m256i {
        let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
        _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
    }

    /// Per-lane sums of signed byte products `x * y` (16 x i32), VNNI `vpdpbusd` based.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn mul_sum_i8_avx512(x: __m512i, y: __m512i) -> __m512i {
        let neg = _mm512_movepi8_mask(x);
        let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), sy)
    }

    /// How far ahead of the block being multiplied the m = 1 dot products prefetch weight
    /// bytes. Decode streams every weight row once from memory; asking for lines this far
    /// ahead keeps more misses in flight than the hardware prefetcher does on its own (the
    /// distance runs past the row end into the next row, which is the next one read).
    pub(crate) const PREFETCH_AHEAD: usize = 512;

    /// Hints the CPU to bring the cache line at `p` into L1. Never faults, for any address.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn prefetch(p: *const u8) {
        // A prefetch is only a hint: it neither faults nor changes memory for any address,
        // which is why the intrinsic is safe.
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }

    /// Horizontal sum of 8 `f32` lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn hsum256(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// Loads the 32 bytes starting at `p` and at `q` into one 512-bit register.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(crate) unsafe fn load_2x256(p: *const u8, q: *const u8) -> __m512i {
        // SAFETY: the caller guarantees 32 readable bytes at `p` and at `q`.
        unsafe {
            let lo = _mm256_loadu_si256(p.cast());
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), _mm256_loadu_si256(q.cast()))
        }
    }

    pub(super) fn vec_dot_avx2(n: usize, w: &[u8], a: &[u8]) -> f32 {
        let nb = check_dot(n, w, B, a, B);
        // SAFETY: handed out only on CPUs with AVX2+FMA+F16C; both rows hold `nb` blocks.
        unsafe { dot_avx2(nb, w.as_ptr(), a.as_ptr()) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_avx2(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            // SAFETY: block i < nb of both rows is in bounds; qs follow the 2-byte scale.
            let (x, y, d) = unsafe {
                let (wb, ab) = (w.add(i * B), a.add(i * B));
                let x = _mm256_loadu_si256(wb.add(2).cast());
                (
                    x,
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
        let nb = check_dot(n, w, B, a, B);
        // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL/VNNI (+AVX2, FMA, F16C); both
        // rows hold `nb` blocks.
        unsafe { dot_avx512(nb, w.as_ptr(), a.as_ptr()) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot_avx512(nb: usize, w: *const u8, a: *const u8) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 2 <= nb {
            prefetch(w.wrapping_add(i * B + PREFETCH_AHEAD));
            // SAFETY: blocks i and i+1 < nb of both rows are in bounds.
            let (x, y, d) = unsafe {
                let (w0, a0) = (w.add(i * B), a.add(i * B));
                let (w1, a1) = (w0.add(B), a0.add(B));
                let x = load_2x256(w0.add(2), w1.add(2));
                (
                    x,
                    load_2x256(a0.add(2), a1.add(2)),
                    scale_products2(w0, a0, w1, a1),
                )
            };
            let k = (i >> 1) & 1;
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mul_sum_i8_avx512(x, y)), d, acc[k]);
            i += 2;
        }
        let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
        if i < nb {
            // SAFETY: block i < nb is in bounds; the CPU has AVX2 (implied by the features).
            sum += unsafe { dot_avx2(1, w.add(i * B), a.add(i * B)) };
        }
        sum
    }

    pub(super) fn dequantize_avx2(src: &[u8], dst: &mut [f32]) {
        let nb = dst.len() / QK;
        assert!(
            src.len() >= dst.len().div_ceil(QK) * B,
            "Q8_0 dequantize: too few blocks"
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
                let d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(
                    b.cast::<u16>().read_unaligned() as i32,
                )));
                for k in 0..4 {
                    let q = _mm_loadl_epi64(b.add(2 + 8 * k).cast());
                    let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
                    _mm256_storeu_ps(dst.add(i * QK + 8 * k), v);
                }
            }
        }
    }

    pub(super) fn dequantize_avx512(src: &[u8], dst: &mut [f32]) {
        let nb = dst.len() / QK;
        assert!(
            src.len() >= dst.len().div_ceil(QK) * B,
            "Q8_0 dequantize: too few blocks"
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
                for k in 0..2 {
                    let q = _mm_loadu_si128(b.add(2 + 16 * k).cast());
                    let v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
                    _mm512_storeu_ps(dst.add(i * QK + 16 * k), v);
                }
            }
        }
    }

    pub(crate) mod tile {
        //! 4 weight rows x 4 activation rows per call: each weight and activation block is
        //! loaded once for the whole tile.
        //!
        //! AVX-512 VNNI: `vpdpbusd` multiplies unsigned by signed bytes, so weights are biased
        //! to `w + 128` (`xor 0x80`) and the accumulator starts at `-128 * sum(a)`:
        //! `sum((w + 128) a) - 128 sum(a) = sum(w a)`, exact in `i32`.
        use std::arch::x86_64::*;

        use super::super::{check_tile, TILE};
        use super::{dot_avx2, hsum256, load_2x256, prefetch, B, PREFETCH_AHEAD};

        type Tile = [[f32; TILE]; TILE];

        pub(crate) fn vec_dot_tile_avx512(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
            let nb = check_tile(n, &w, B, &a, B);
            // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL/VNNI (+AVX2, FMA, F16C);
            // every row holds `nb` blocks (checked above).
            unsafe { tile_avx512(nb, w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr)) }
        }

        /// Scales of blocks `i`, `i+1` of 4 rows of `block`-byte blocks that start with an
        /// `f16` scale, as `[d_r(i), d_r(i+1)]` at lanes `2r, 2r+1`.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub(crate) unsafe fn pair_scales(
            rows: [*const u8; TILE],
            i: usize,
            block: usize,
        ) -> __m512 {
            // SAFETY: the caller guarantees blocks i and i+1 of every row are readable.
            let h = unsafe {
                rows.map(|p| {
                    let b = p.add(i * block);
                    let lo = b.cast::<u16>().read_unaligned() as i32;
                    lo | (b.add(block).cast::<u16>().read_unaligned() as i32) << 16
                })
            };
            _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_setr_epi32(h[0], h[1], h[2], h[3])))
        }

        /// Lanes `[k; 8] ++ [k + 1; 8]` of `v`.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub(crate) fn spread(v: __m512, k: i32) -> __m512 {
            let idx = _mm512_setr_epi32(
                k,
                k,
                k,
                k,
                k,
                k,
                k,
                k,
                k + 1,
                k + 1,
                k + 1,
                k + 1,
                k + 1,
                k + 1,
                k + 1,
                k + 1,
            );
            _mm512_permutexvar_ps(idx, v)
        }

        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn tile_avx512(nb: usize, w: [*const u8; TILE], a: [*const u8; TILE]) -> Tile {
            let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
            let bias = _mm512_set1_epi8(-128);
            let mut i = 0;
            while i + 2 <= nb {
                // SAFETY: blocks i and i+1 < nb of every row are in bounds.
                let (wq, ws, aq, as_) = unsafe {
                    (
                        w.map(|p| {
                            let q = load_2x256(p.add(i * B + 2), p.add((i + 1) * B + 2));
                            _mm512_xor_si512(q, bias)
                        }),
                        pair_scales(w, i, B),
                        a.map(|p| load_2x256(p.add(i * B + 2), p.add((i + 1) * B + 2))),
                        pair_scales(a, i, B),
                    )
                };
                let dw: [__m512; TILE] = std::array::from_fn(|r| spread(ws, 2 * r as i32));
                for j in 0..TILE {
                    let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, aq[j]);
                    let init = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
                    let da = spread(as_, 2 * j as i32);
                    for r in 0..TILE {
                        let p = _mm512_dpbusd_epi32(init, wq[r], aq[j]);
                        let d = _mm512_mul_ps(dw[r], da);
                        acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[j][r]);
                    }
                }
                i += 2;
            }
            let mut out = [[0.0; TILE]; TILE];
            for j in 0..TILE {
                for r in 0..TILE {
                    out[j][r] = _mm512_reduce_add_ps(acc[j][r]);
                    if i < nb {
                        // SAFETY: block i < nb of both rows is in bounds.
                        out[j][r] += unsafe { dot_avx2(1, w[r].add(i * B), a[j].add(i * B)) };
                    }
                }
            }
            out
        }

        /// `[vec_dot(n, w[r], a); TILE]`: 4 weight rows against one activation row (m = 1,
        /// decode), each activation block loaded once for the 4 rows.
        pub(crate) fn vec_dot_rows_avx512(n: usize, w: [&[u8]; TILE], a: &[u8]) -> [f32; TILE] {
            let nb = check_tile(n, &w, B, &[a; TILE], B);
            // SAFETY: handed out only on CPUs with AVX-512 F/BW/VL/VNNI (+AVX2, FMA, F16C);
            // every row holds `nb` blocks (checked above).
            unsafe { rows_avx512(nb, w.map(<[u8]>::as_ptr), a.as_ptr()) }
        }

        /// The activation scales of blocks `i`, `i+1` as `[d(i), d(i+1)]` repeated over 8
        /// lanes (the layout of [`pair_scales`]), for `block`-byte blocks.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub(crate) unsafe fn act_pair_scales(a: *const u8, i: usize, block: usize) -> __m512 {
            // SAFETY: the caller guarantees blocks i and i+1 of `a` are readable.
            let h = unsafe {
                let b = a.add(i * block);
                let lo = b.cast::<u16>().read_unaligned() as i32;
                lo | (b.add(block).cast::<u16>().read_unaligned() as i32) << 16
            };
            let d = _mm_cvtph_ps(_mm_set1_epi32(h));
            _mm512_castps256_ps512(_mm256_set_m128(d, d))
        }

        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn rows_avx512(nb: usize, w: [*const u8; TILE], a: *const u8) -> [f32; TILE] {
            let mut acc = [_mm512_setzero_ps(); TILE];
            let bias = _mm512_set1_epi8(-128);
            let mut i = 0;
            while i + 2 <= nb {
                for p in w {
                    prefetch(p.wrapping_add(i * B + PREFETCH_AHEAD));
                }
                // SAFETY: blocks i and i+1 < nb of every row are in bounds.
                let (wq, ws, aq, da) = unsafe {
                    (
                        w.map(|p| {
                            let q = load_2x256(p.add(i * B + 2), p.add((i + 1) * B + 2));
                            _mm512_xor_si512(q, bias)
                        }),
                        pair_scales(w, i, B),
                        load_2x256(a.add(i * B + 2), a.add((i + 1) * B + 2)),
                        act_pair_scales(a, i, B),
                    )
                };
                // `sum((w + 128) a) - 128 sum(a)`, the correction computed once for 4 rows.
                let init = _mm512_sub_epi32(
                    _mm512_setzero_si512(),
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, aq),
                );
                let d = _mm512_mul_ps(ws, da);
                for r in 0..TILE {
                    let p = _mm512_dpbusd_epi32(init, wq[r], aq);
                    let dr = spread(d, 2 * r as i32);
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dr, acc[r]);
                }
                i += 2;
            }
            let mut out = [0.0; TILE];
            for r in 0..TILE {
                out[r] = _mm512_reduce_add_ps(acc[r]);
                if i < nb {
                    // SAFETY: block i < nb of both rows is in bounds.
                    out[r] += unsafe { dot_avx2(1, w[r].add(i * B), a.add(i * B)) };
                }
            }
            out
        }

        pub(crate) fn vec_dot_tile_avx2(n: usize, w: [&[u8]; TILE], a: [&[u8]; TILE]) -> Tile {
            let nb = check_tile(n, &w, B, &a, B);
            let (w, a) = (w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr));
            // SAFETY: handed out only on CPUs with AVX2+FMA+F16C; every row holds `nb` blocks.
            let (lo, hi) = unsafe {
                (
                    half_avx2(nb, w, [a[0], a[1]]),
                    half_avx2(nb, w, [a[2], a[3]]),
                )
            };
            [lo[0], lo[1], hi[0], hi[1]]
        }

        /// 4 weight rows x 2 activation rows (AVX2 has 16 registers), one block per step;
        /// signed products as `|w| * sign(a, w)` (see the module docs of `x86`).
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn half_avx2(
            nb: usize,
            w: [*const u8; TILE],
            a: [*const u8; 2],
        ) -> [[f32; TILE]; 2] {
            let mut acc = [[_mm256_setzero_ps(); TILE]; 2];
            let ones = _mm256_set1_epi16(1);
            for i in 0..nb {
                // SAFETY: block i < nb of every row is in bounds.
                let (wq, ws, aq, as_) = unsafe {
                    let h = w.map(|p| p.add(i * B).cast::<u16>().read_unaligned() as i16);
                    let g = a.map(|p| p.add(i * B).cast::<u16>().read_unaligned() as i16);
                    (
                        w.map(|p| _mm256_loadu_si256(p.add(i * B + 2).cast())),
                        _mm_cvtph_ps(_mm_setr_epi16(h[0], h[1], h[2], h[3], 0, 0, 0, 0)),
                        a.map(|p| _mm256_loadu_si256(p.add(i * B + 2).cast())),
                        _mm_cvtph_ps(_mm_setr_epi16(g[0], g[1], 0, 0, 0, 0, 0, 0)),
                    )
                };
                let wabs = wq.map(|x| _mm256_sign_epi8(x, x));
                for j in 0..2 {
                    let dd = _mm256_castps128_ps256(_mm_mul_ps(
                        ws,
                        _mm_permutevar_ps(as_, _mm_set1_epi32(j as i32)),
                    ));
                    for r in 0..TILE {
                        let sy = _mm256_sign_epi8(aq[j], wq[r]);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs[r], sy), ones);
                        let d = _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(r as i32));
                        acc[j][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[j][r]);
                    }
                }
            }
            let mut out = [[0.0; TILE]; 2];
            for j in 0..2 {
                for r in 0..TILE {
                    out[j][r] = hsum256(acc[j][r]);
                }
            }
            out
        }
    }
}
