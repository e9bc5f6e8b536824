//! AVX2 (`maddubs`) and AVX-512 VNNI (`vpdpbusd`) INT4 x Q8_1 kernels.
//!
//! The kernels walk the row as a stream of 32-element sub-blocks `t = S b + s` (group `b`,
//! sub-block `s`), each paired with activation block `t`:
//!
//! ```text
//! weight group b:  | d z 0 | sub 0 | sub 1 | ... | sub S-1 |
//!                              t = S b + s   <->   Q8_1 block t: | d_a s_a | a_q x 32 |
//! ```
//!
//! and add `(d d_a) sumi - (d z) s_a` per sub-block: AVX-512 two sub-blocks per step (one
//! 64-lane `vpdpbusd`), AVX2 one. Pointers passed to the `unsafe fn`s address whole blocks
//! (checked by the safe wrappers).
use std::arch::x86_64::*;

use super::{block_bytes, check_dot, check_tile, A, TILE};
use crate::quant::x86::load::load_2x256;
use crate::quant::x86::nibbles::{nibbles2_avx512, nibbles_avx2};
use crate::quant::x86::reduce::hsum256;

/// Sub-block `t`'s packed codes, and its group's header, in a row of `S`-sub-block groups.
#[inline(always)]
unsafe fn sub_ptrs<const S: usize>(w: *const u8, t: usize) -> (*const u8, *const u8) {
    // SAFETY: the caller guarantees group t / S of the row is in bounds.
    unsafe {
        let hdr = w.add(t / S * block_bytes::<S>());
        (hdr, hdr.add(4 + 16 * (t % S)))
    }
}

/// `(d, z)` of the group header at `hdr`, as `d` bits and `z`.
#[inline(always)]
unsafe fn header(hdr: *const u8) -> (u16, i32) {
    // SAFETY: the caller guarantees the 4 header bytes are readable.
    unsafe { (hdr.cast::<u16>().read_unaligned(), *hdr.add(2) as i32) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn vec_dot_avx2<const S: usize>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = check_dot::<S>(n, w, a);
    // SAFETY: the features are enabled here; the rows hold `nb` groups and
    // `nb * S` activation blocks.
    unsafe { dot_avx2::<S>(0, nb * S, w.as_ptr(), a.as_ptr()) }
}

/// Sub-blocks `t0..t1`, one per step.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2<const S: usize>(t0: usize, t1: usize, w: *const u8, a: *const u8) -> f32 {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut acc_m = 0.0f32;
    for t in t0..t1 {
        // SAFETY: sub-block t < t1 and its group are in bounds of both rows.
        let (x, y, (dw, z), ah) = unsafe {
            let (hdr, qs) = sub_ptrs::<S>(w, t);
            let ab = a.add(t * A);
            (
                nibbles_avx2(qs),
                _mm256_loadu_si256(ab.add(4).cast()),
                header(hdr),
                ab.cast::<u32>().read_unaligned(),
            )
        };
        // [d, d_a, s_a, 0]
        let v = _mm_cvtph_ps(_mm_cvtsi64_si128((dw as u64 | (ah as u64) << 16) as i64));
        // SAFETY: plain reinterpretation of 4 `f32` lanes.
        let f: [f32; 4] = unsafe { std::mem::transmute::<__m128, [f32; 4]>(v) };
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), ones);
        let dd = _mm256_set1_ps(f[0] * f[1]);
        acc[t & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dd, acc[t & 1]);
        acc_m += f[0] * z as f32 * f[2];
    }
    hsum256(_mm256_add_ps(acc[0], acc[1])) - acc_m
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn vec_dot_avx512<const S: usize>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = check_dot::<S>(n, w, a);
    // SAFETY: the features are enabled here; the rows
    // hold `nb` groups and `nb * S` activation blocks.
    unsafe { dot_avx512::<S>(nb * S, w.as_ptr(), a.as_ptr()) }
}

/// Scales of sub-blocks `t, t + 1`: `([d d_a (t); 8] ++ [d d_a (t+1); 8], [.., .., d z s_a (t),
/// d z s_a (t+1), ..])`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn pair_scales<const S: usize>(w: *const u8, a: *const u8, t: usize) -> (__m512, __m256) {
    // SAFETY: the caller guarantees sub-blocks t, t + 1 and their groups are in bounds.
    let ((d0, z0), (d1, z1), a0, a1) = unsafe {
        (
            header(sub_ptrs::<S>(w, t).0),
            header(sub_ptrs::<S>(w, t + 1).0),
            a.add(t * A).cast::<u32>().read_unaligned() as u64,
            a.add((t + 1) * A).cast::<u32>().read_unaligned() as u64,
        )
    };
    // Lanes: 0 d(t), 1 d(t+1), 2 d_a(t), 3 s_a(t), 4 d_a(t+1), 5 s_a(t+1).
    let lo = d0 as u64 | (d1 as u64) << 16 | a0 << 32;
    let v = _mm256_cvtph_ps(_mm_set_epi64x(a1 as i64, lo as i64));
    let dw = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 1, 0, 1, 0, 1, 0, 1));
    let act = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(2, 4, 3, 5, 0, 0, 0, 0));
    let zs = _mm256_cvtepi32_ps(_mm256_setr_epi32(0, 0, z0, z1, 0, 0, 0, 0));
    // [d d_a (t), d d_a (t+1), d z s_a (t), d z s_a (t+1), 0...]
    let prod = _mm256_mul_ps(dw, act);
    let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let dd = _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(prod));
    (dd, _mm256_mul_ps(prod, zs))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_avx512<const S: usize>(nsub: usize, w: *const u8, a: *const u8) -> f32 {
    let mut acc = _mm512_setzero_ps();
    let mut acc_m = _mm256_setzero_ps();
    let mut t = 0;
    while t + 2 <= nsub {
        // SAFETY: sub-blocks t, t + 1 < nsub and their groups are in bounds of both rows.
        let (x, y, (dd, m)) = unsafe {
            let (q0, q1) = (sub_ptrs::<S>(w, t).1, sub_ptrs::<S>(w, t + 1).1);
            (
                nibbles2_avx512(q0, q1),
                load_2x256(a.add(t * A + 4), a.add((t + 1) * A + 4)),
                pair_scales::<S>(w, a, t),
            )
        };
        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, y);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dd, acc);
        acc_m = _mm256_add_ps(acc_m, m);
        t += 2;
    }
    let mut sum = _mm512_reduce_add_ps(acc) - hsum256(acc_m);
    if t < nsub {
        // SAFETY: sub-block t < nsub is in bounds; AVX2+FMA+F16C are among the features.
        sum += unsafe { dot_avx2::<S>(t, nsub, w, a) };
    }
    sum
}

type Tile = [[f32; TILE]; TILE];

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn vec_dot_tile_avx512<const S: usize>(
    n: usize,
    w: [&[u8]; TILE],
    a: [&[u8]; TILE],
) -> Tile {
    let nb = check_tile::<S>(n, &w, &a);
    // SAFETY: the features are enabled here; every row
    // holds `nb` groups / `nb * S` activation blocks (checked above).
    unsafe { tile_avx512::<S>(nb * S, w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr)) }
}

/// Weight scales of sub-blocks `t, t + 1` of 4 rows: `(d, d z)` with lanes
/// `2r, 2r + 1` = row `r`'s values for `t`, `t + 1`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_weight_scales<const S: usize>(w: [*const u8; TILE], t: usize) -> (__m256, __m256) {
    // SAFETY: the caller guarantees sub-blocks t, t + 1 and their groups are in bounds.
    let h = unsafe {
        w.map(|p| {
            (
                header(sub_ptrs::<S>(p, t).0),
                header(sub_ptrs::<S>(p, t + 1).0),
            )
        })
    };
    let bits = h.map(|((d0, _), (d1, _))| (d0 as u32 | (d1 as u32) << 16) as i32);
    let d = _mm256_cvtph_ps(_mm_setr_epi32(bits[0], bits[1], bits[2], bits[3]));
    let z = _mm256_cvtepi32_ps(_mm256_setr_epi32(
        h[0].0 .1, h[0].1 .1, h[1].0 .1, h[1].1 .1, h[2].0 .1, h[2].1 .1, h[3].0 .1, h[3].1 .1,
    ));
    (d, _mm256_mul_ps(d, z))
}

/// Activation scales of blocks `t, t + 1` of 4 rows: lanes `4j..4j + 4` =
/// `d_a(t), s_a(t), d_a(t+1), s_a(t+1)` of row `j`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_act_scales(a: [*const u8; TILE], t: usize) -> __m512 {
    // SAFETY: the caller guarantees blocks t and t + 1 of every row are readable.
    let h = unsafe {
        a.map(|p| {
            let lo = p.add(t * A).cast::<u32>().read_unaligned() as i64;
            lo | (p.add((t + 1) * A).cast::<u32>().read_unaligned() as i64) << 32
        })
    };
    _mm512_cvtph_ps(_mm256_setr_epi64x(h[0], h[1], h[2], h[3]))
}

/// Lanes `[i; 8] ++ [k; 8]` of `v`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn spread(v: __m512, i: i32, k: i32) -> __m512 {
    let idx = _mm512_setr_epi32(i, i, i, i, i, i, i, i, k, k, k, k, k, k, k, k);
    _mm512_permutexvar_ps(idx, v)
}

/// 4 weight rows x 4 activation rows, two sub-blocks per step; the zero-point terms of a
/// (row, activation) pair gather in lanes `2r, 2r + 1` of `acc_m[j]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile_avx512<const S: usize>(
    nsub: usize,
    w: [*const u8; TILE],
    a: [*const u8; TILE],
) -> Tile {
    let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
    let mut acc_m = [_mm256_setzero_ps(); TILE];
    let mut t = 0;
    while t + 2 <= nsub {
        // SAFETY: sub-blocks t, t + 1 < nsub and their groups are in bounds of every row.
        let (wq, (dw, dz), aq, as_) = unsafe {
            (
                w.map(|p| nibbles2_avx512(sub_ptrs::<S>(p, t).1, sub_ptrs::<S>(p, t + 1).1)),
                tile_weight_scales::<S>(w, t),
                a.map(|p| load_2x256(p.add(t * A + 4), p.add((t + 1) * A + 4))),
                tile_act_scales(a, t),
            )
        };
        let dw512 = _mm512_castps256_ps512(dw);
        let dws: [__m512; TILE] =
            std::array::from_fn(|r| spread(dw512, 2 * r as i32, 2 * r as i32 + 1));
        for j in 0..TILE {
            let s = 4 * j as i32;
            let sa = _mm512_castps512_ps256(_mm512_permutexvar_ps(
                _mm512_setr_epi32(
                    s + 1,
                    s + 3,
                    s + 1,
                    s + 3,
                    s + 1,
                    s + 3,
                    s + 1,
                    s + 3,
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
            acc_m[j] = _mm256_fmadd_ps(dz, sa, acc_m[j]);
            let da = spread(as_, s, s + 2);
            for r in 0..TILE {
                let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[r], aq[j]);
                let d = _mm512_mul_ps(dws[r], da);
                acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc[j][r]);
            }
        }
        t += 2;
    }
    let mut out = [[0.0; TILE]; TILE];
    for j in 0..TILE {
        // SAFETY: plain reinterpretation of 8 `f32` lanes.
        let m: [f32; 8] = unsafe { std::mem::transmute::<__m256, [f32; 8]>(acc_m[j]) };
        for r in 0..TILE {
            out[j][r] = _mm512_reduce_add_ps(acc[j][r]) - (m[2 * r] + m[2 * r + 1]);
            if t < nsub {
                // SAFETY: sub-block t < nsub is in bounds of both rows.
                out[j][r] += unsafe { dot_avx2::<S>(t, nsub, w[r], a[j]) };
            }
        }
    }
    out
}
