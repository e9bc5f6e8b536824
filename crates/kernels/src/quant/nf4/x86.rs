//! AVX2 and AVX-512 VNNI NF4 / NF4_DQ x Q8_0 kernels. Codes become table bytes with one byte
//! shuffle (the 16-entry table fits a 128-bit lane):
//!
//! * AVX-512: the table biased by 128 (`NF4_I8 + 128`, unsigned) times `a` with `vpdpbusd`,
//!   minus `128 sum(a)` (a second `vpdpbusd` of `0x80` bytes): exact in `i32`.
//! * AVX2: the signed table times `a` as `|t| * sign(a, t)` with `maddubs` (`|t| <= 127`).
//!
//! Each 64-weight block meets two Q8_0 blocks; the integer sums are scaled by
//! `absmax / 127 * d_a`. Pointers passed to the `unsafe fn`s address whole blocks.
use std::arch::x86_64::*;

use super::{dynamic_map, Layout, A, NF4_I8};
use crate::quant::x86::load::load_2x256;
use crate::quant::x86::nibbles::{nibbles2_avx512, nibbles_avx2};
use crate::quant::x86::q8::mul_sum_i8_avx2;
use crate::quant::x86::reduce::hsum256;

/// A checked weight row and activation row: `nb` blocks, and the NF4_DQ header `(c, offset)`
/// (zeros for NF4, which has no header).
#[derive(Clone, Copy)]
struct Rows {
    nb: usize,
    w: *const u8,
    a: *const u8,
    c: f32,
    offset: f32,
}

impl Rows {
    /// Checks the rows (the SIMD loops rely on it for memory safety) and reads the header.
    #[inline(always)]
    fn new<const DQ: bool>(n: usize, w: &[u8], a: &[u8]) -> Rows {
        let nb = Layout::of(DQ).check_dot(n, w, a);
        let (c, offset) = if DQ {
            let f = |o: usize| f32::from_le_bytes([w[o], w[o + 1], w[o + 2], w[o + 3]]);
            (f(0), f(4))
        } else {
            (0.0, 0.0)
        };
        let (w, a) = (w.as_ptr(), a.as_ptr());
        Rows {
            nb,
            w,
            a,
            c,
            offset,
        }
    }

    /// `absmax / 127` of weight block `b`, and a pointer to its 32 code bytes.
    ///
    /// # Safety
    /// `b < nb`.
    #[inline(always)]
    unsafe fn block<const DQ: bool>(self, b: usize) -> (f32, *const u8) {
        let l = Layout::of(DQ);
        // SAFETY: the caller guarantees block b of the (checked) row is in bounds.
        unsafe {
            let blk = self.w.add(l.hdr + b * l.bb);
            let am = if DQ {
                dynamic_map()[*blk as usize] * self.c + self.offset
            } else {
                blk.cast::<f32>().read_unaligned()
            };
            (am / 127.0, blk.add(l.qoff))
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn vec_dot_avx2<const DQ: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the features are enabled here; `Rows::new` checked the rows.
    unsafe { dot_avx2::<DQ>(Rows::new::<DQ>(n, w, a)) }
}

/// # Safety
/// The CPU has AVX2, FMA and F16C; `rows` was checked by [`Rows::new`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2<const DQ: bool>(rows: Rows) -> f32 {
    // SAFETY: NF4_I8 holds 16 bytes.
    let t = unsafe { _mm_loadu_si128(NF4_I8.as_ptr().cast()) };
    let table = _mm256_broadcastsi128_si256(t);
    let mut acc = [_mm256_setzero_ps(); 2];
    for b in 0..rows.nb {
        // SAFETY: block b < nb of the weight row and blocks 2b, 2b + 1 of the activations are
        // in bounds.
        unsafe {
            let (sw, qs) = rows.block::<DQ>(b);
            for (s, acc) in acc.iter_mut().enumerate() {
                let ab = rows.a.add((2 * b + s) * A);
                let x = _mm256_shuffle_epi8(table, nibbles_avx2(qs.add(16 * s)));
                let y = _mm256_loadu_si256(ab.add(2).cast());
                let da = half::f16::from_bits(ab.cast::<u16>().read_unaligned()).to_f32();
                let p = _mm256_cvtepi32_ps(mul_sum_i8_avx2(x, y));
                *acc = _mm256_fmadd_ps(p, _mm256_set1_ps(sw * da), *acc);
            }
        }
    }
    hsum256(_mm256_add_ps(acc[0], acc[1]))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn vec_dot_avx512<const DQ: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the features are enabled here; `Rows::new` checked the rows.
    unsafe { dot_avx512::<DQ>(Rows::new::<DQ>(n, w, a)) }
}

/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `rows` was checked by
/// [`Rows::new`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_avx512<const DQ: bool>(rows: Rows) -> f32 {
    let biased: [u8; 16] = std::array::from_fn(|k| (NF4_I8[k] as i32 + 128) as u8);
    // SAFETY: `biased` holds 16 bytes.
    let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(biased.as_ptr().cast()) });
    let bias = _mm512_set1_epi8(-128);
    let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let mut acc = [_mm512_setzero_ps(); 2];
    for b in 0..rows.nb {
        // SAFETY: block b < nb of the weight row and blocks 2b, 2b + 1 of the activations are
        // in bounds.
        let (sw, x, y, da) = unsafe {
            let (sw, qs) = rows.block::<DQ>(b);
            let (a0, a1) = (rows.a.add(2 * b * A), rows.a.add((2 * b + 1) * A));
            let h = a0.cast::<u16>().read_unaligned() as i32
                | (a1.cast::<u16>().read_unaligned() as i32) << 16;
            (
                sw,
                _mm512_shuffle_epi8(table, nibbles2_avx512(qs, qs.add(16))),
                load_2x256(a0.add(2), a1.add(2)),
                _mm_cvtph_ps(_mm_cvtsi32_si128(h)),
            )
        };
        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, y);
        let p = _mm512_sub_epi32(p, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, y));
        let d = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_mul_ps(da, _mm_set1_ps(sw))));
        acc[b & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[b & 1]);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
}
