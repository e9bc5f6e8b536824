//! The "offset" formats, Q4_0 and Q5_0 (`x = (q - o) d` with unsigned quants `q` and a fixed
//! offset `o`: 8, 16), and Q8_0 seen as one (`w + 128` and offset 128), with AVX-512 VNNI:
//! `vpdpbusd` takes unsigned `q` as is, and the correction `sum(o a)` depends on the
//! activation row only. Row dot products (one weight row, or 4 against one activation row)
//! here; the 4 x 4 tiles in [`super::offset_tile`].
use std::arch::x86_64::*;

use super::load::load_2x256;
use super::q8::{prefetch, scale_products2, PREFETCH_AHEAD};
use super::signed_rows::{dot_of, SignedBlocks, A};
use super::tile::reduce_rows_512;
use super::tile_scales::{act_pair_scales, pair_scales, spread};
use crate::quant::rows::{check_dot, check_tile};
use crate::quant::TILE;

/// A [`SignedBlocks`] format whose quants are unsigned bytes minus [`OffsetBlocks::OFFSET`].
pub(crate) trait OffsetBlocks: SignedBlocks {
    /// The offset `o` (as a byte: Q8_0's 128 is `-128`).
    const OFFSET: i8;

    /// The unsigned quants of the blocks at `b0` and `b1`, elements 0..32 of each.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; whole blocks are readable at
    /// `b0` and `b1`.
    unsafe fn unsigned2_avx512(b0: *const u8, b1: *const u8) -> __m512i;
}

/// The AVX-512 `vec_dot` of format `F` (`PREFETCH`: see [`dot_avx512`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_avx512<F: OffsetBlocks, const PREFETCH: bool>(
    n: usize,
    w: &[u8],
    a: &[u8],
) -> f32 {
    let nb = check_dot(n, w, F::BLOCK, a, A);
    // SAFETY: the rows hold `nb` blocks (checked above); the features are enabled here.
    unsafe { dot_avx512::<F, PREFETCH>(nb, w.as_ptr(), a.as_ptr()) }
}

/// The AVX-512 dot product of format `F`, two blocks per step: `sum(q * a) - sum(o * a)`,
/// both with `vpdpbusd`; an odd last block goes to the AVX2 dot. With `PREFETCH`, weight
/// bytes [`PREFETCH_AHEAD`] ahead are prefetched.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `w` holds `nb` blocks of `F` and
/// `a` `nb` Q8_0 blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_avx512<F: OffsetBlocks, const PREFETCH: bool>(
    nb: usize,
    w: *const u8,
    a: *const u8,
) -> f32 {
    let (block, o) = (F::BLOCK, _mm512_set1_epi8(F::OFFSET));
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut i = 0;
    while i + 2 <= nb {
        if PREFETCH {
            prefetch(w.wrapping_add(i * block + PREFETCH_AHEAD));
        }
        // SAFETY: blocks i and i+1 < nb of both rows are in bounds.
        let (x, y, d) = unsafe {
            let (w0, a0) = (w.add(i * block), a.add(i * A));
            let (w1, a1) = (w0.add(block), a0.add(A));
            (
                F::unsigned2_avx512(w0, w1),
                load_2x256(a0.add(2), a1.add(2)),
                scale_products2(w0, a0, w1, a1),
            )
        };
        let zero = _mm512_setzero_si512();
        let p = _mm512_sub_epi32(
            _mm512_dpbusd_epi32(zero, x, y),
            _mm512_dpbusd_epi32(zero, o, y),
        );
        let k = (i >> 1) & 1;
        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[k]);
        i += 2;
    }
    let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
    if i < nb {
        // SAFETY: block i < nb of both rows is in bounds; AVX2+FMA+F16C are enabled.
        sum += unsafe { dot_of::<F>(1, w.add(i * block), a.add(i * A)) };
    }
    sum
}

/// `[vec_dot(n, w[r], a); TILE]` of format `F`: 4 weight rows against one activation row
/// (m = 1, decode).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn vec_dot_rows_avx512<F: OffsetBlocks>(
    n: usize,
    w: [&[u8]; TILE],
    a: &[u8],
) -> [f32; TILE] {
    let nb = check_tile(n, &w, F::BLOCK, &[a; TILE], A);
    // SAFETY: every row holds `nb` blocks (checked above); the features are enabled here.
    unsafe { rows_avx512::<F>(nb, w.map(<[u8]>::as_ptr), a.as_ptr()) }
}

/// 4 weight rows, two blocks per step: the activation quants, their scales and the
/// `sum(o a)` correction are loaded or computed once for the 4 rows.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; every weight row holds `nb` blocks
/// of `F` and `a` `nb` Q8_0 blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn rows_avx512<F: OffsetBlocks>(
    nb: usize,
    w: [*const u8; TILE],
    a: *const u8,
) -> [f32; TILE] {
    let (b, o) = (F::BLOCK, _mm512_set1_epi8(F::OFFSET));
    let mut acc = [_mm512_setzero_ps(); TILE];
    let mut i = 0;
    while i + 2 <= nb {
        for p in w {
            prefetch(p.wrapping_add(i * b + PREFETCH_AHEAD));
        }
        // SAFETY: blocks i and i+1 < nb of every row are in bounds.
        let (x, ws, y, da) = unsafe {
            (
                w.map(|p| F::unsigned2_avx512(p.add(i * b), p.add((i + 1) * b))),
                pair_scales(w, i, b),
                load_2x256(a.add(i * A + 2), a.add((i + 1) * A + 2)),
                act_pair_scales(a, i, A),
            )
        };
        let zero = _mm512_setzero_si512();
        let init = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, o, y));
        let d = _mm512_mul_ps(ws, da);
        for r in 0..TILE {
            let p = _mm512_dpbusd_epi32(init, x[r], y);
            let dr = spread(d, 2 * r as i32);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dr, acc[r]);
        }
        i += 2;
    }
    let mut out = reduce_rows_512(acc);
    if i < nb {
        for (r, o) in out.iter_mut().enumerate() {
            // SAFETY: block i < nb of both rows is in bounds; AVX2+FMA+F16C are enabled.
            *o += unsafe { dot_of::<F>(1, w[r].add(i * b), a.add(i * A)) };
        }
    }
    out
}
