//! The AMX-BF16 kernel of [`crate::cpu::bf16_tiles`]: 32 BF16 weight rows against a group of
//! 32 (or 16) activation rows rounded to bf16, in `tdpbf16ps` tile products with `f32`
//! accumulators.
//!
//! ```text
//!   A (tmm4, tmm5): 16 weight rows × 32 elements, loaded straight from the row-major matrix
//!                   (64 bytes a row, the row stride apart): no packing of the weights
//!   B (tmm6, tmm7): 16 lines × 16 activation rows × 2 elements (the pair layout the packer
//!                   writes: line p holds elements 2p, 2p + 1 of each of 16 rows)
//!   C (tmm0..tmm3): C[r][n] = Σ_k W[r][k] · X[n][k], weight rows down, activation rows across
//! ```
//!
//! A step of 32 elements loads two A and two B tiles and runs four products; at the end the C
//! tiles are stored and transposed (AVX-512) so that the results come out per activation row.

use std::arch::asm;
use std::arch::x86_64::*;

use super::{configure, Layout};

/// Weight rows of a panel (two A tiles) and activation rows of a group (two B tiles).
pub(crate) const ROWS: usize = 32;

/// Elements of K per tile step (64 bytes of bf16).
pub(crate) const K_STEP: usize = 32;

/// Bytes of one B tile: 16 lines of 64 bytes.
pub(crate) const B_TILE_BYTES: usize = 1024;

/// Bytes of a group's packed activations per step: the hi parts' two B tiles (rows 0..16,
/// 16..32), then the lo parts' two.
pub(crate) const STEP_BYTES: usize = 4 * B_TILE_BYTES;

/// The results of one call: `out[n][r]` for activation row `n`, weight row `r`.
pub(crate) type PanelOut = [[f32; ROWS]; ROWS];

/// The four C tiles as stored: 16 rows of 16 `f32` each.
#[repr(C, align(64))]
struct CTiles([[[f32; 16]; 16]; 4]);

/// `out` = the panel of 32 weight rows at `w` (`w_stride` bytes apart, `steps` × 32 elements
/// each) times the group's packed activations at `b` ([`STEP_BYTES`] a step: hi and lo parts
/// of the activations, so each step runs the products twice over the same A tiles); when
/// `!two`, only the group's first 16 activation rows are computed (`out[16..]` is left as is).
///
/// # Safety
/// [`crate::cpu::Isa::bf16_tiles_supported`] holds (AMX-BF16 granted, AVX-512); the 32 rows at
/// `w` hold `steps · 64` readable bytes each, and `b` `steps · STEP_BYTES` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn panel(
    w: *const u8,
    w_stride: usize,
    steps: usize,
    b: *const u8,
    two: bool,
    out: &mut PanelOut,
) {
    // SAFETY: the caller's contract covers the tile instructions and every address below:
    // A rows 0..16 at `w`, 16..32 at `w + 16 · stride`, 64 bytes at step `s`; B tiles within
    // step s's `STEP_BYTES` at `b + STEP_BYTES · s`.
    unsafe {
        configure(Layout::Bf16);
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
        let w1 = w.add(16 * w_stride);
        for s in 0..steps {
            let (a0, a1) = (w.add(64 * s), w1.add(64 * s));
            // The hi tiles, then the lo tiles, against the same A tiles.
            for part in 0..2 {
                let b0 = b.add(STEP_BYTES * s + 2 * B_TILE_BYTES * part);
                if two {
                    asm!(
                        "tileloadd tmm4, [{a0} + {sa} * 1]",
                        "tileloadd tmm6, [{b0} + {line} * 1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tileloadd tmm5, [{a1} + {sa} * 1]",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tileloadd tmm7, [{b1} + {line} * 1]",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a0 = in(reg) a0, a1 = in(reg) a1, sa = in(reg) w_stride,
                        b0 = in(reg) b0, b1 = in(reg) b0.add(B_TILE_BYTES),
                        line = in(reg) 64usize, options(nostack, readonly),
                    );
                } else {
                    asm!(
                        "tileloadd tmm4, [{a0} + {sa} * 1]",
                        "tileloadd tmm6, [{b0} + {line} * 1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tileloadd tmm5, [{a1} + {sa} * 1]",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        a0 = in(reg) a0, a1 = in(reg) a1, sa = in(reg) w_stride,
                        b0 = in(reg) b0, line = in(reg) 64usize,
                        options(nostack, readonly),
                    );
                }
            }
        }
        let mut c = CTiles([[[0.0; 16]; 16]; 4]);
        let cp = c.0.as_mut_ptr();
        asm!(
            "tilestored [{c0} + {line} * 1], tmm0",
            "tilestored [{c2} + {line} * 1], tmm2",
            c0 = in(reg) cp, c2 = in(reg) cp.add(2), line = in(reg) 64usize,
            options(nostack),
        );
        if two {
            asm!(
                "tilestored [{c1} + {line} * 1], tmm1",
                "tilestored [{c3} + {line} * 1], tmm3",
                c1 = in(reg) cp.add(1), c3 = in(reg) cp.add(3), line = in(reg) 64usize,
                options(nostack),
            );
        }
        // C tile t: weight rows 16 (t / 2).., activation rows 16 (t % 2)...
        for t in 0..if two { 4 } else { 2 } {
            let t = if two { t } else { 2 * t };
            transpose(&c.0[t], out, 16 * (t % 2), 16 * (t / 2));
        }
    }
}

/// `out[n0 + n][r0 + r] = c[r][n]` for `n, r < 16`: a 16 × 16 transpose in registers.
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose(c: &[[f32; 16]; 16], out: &mut PanelOut, n0: usize, r0: usize) {
    // SAFETY: each row of `c` holds 16 floats.
    let r: [__m512; 16] = std::array::from_fn(|i| unsafe { _mm512_loadu_ps(c[i].as_ptr()) });
    // 32-bit interleave of row pairs, then 64-bit interleave of pairs of pairs: b[4i + j]
    // holds, in 128-bit lane l, rows 4i..4i + 4 of column 4l + j.
    let a: [__m512; 16] = std::array::from_fn(|i| {
        let (x, y) = (r[i & !1], r[i | 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_ps(x, y)
        } else {
            _mm512_unpackhi_ps(x, y)
        }
    });
    let b: [__m512; 16] = std::array::from_fn(|i| {
        let (q, j) = (i / 4, i % 4);
        let (x, y) = (
            _mm512_castps_pd(a[4 * q + j / 2]),
            _mm512_castps_pd(a[4 * q + 2 + j / 2]),
        );
        _mm512_castpd_ps(if j % 2 == 0 {
            _mm512_unpacklo_pd(x, y)
        } else {
            _mm512_unpackhi_pd(x, y)
        })
    });
    // Column 4l + j gathers lane l of b[j], b[4 + j], b[8 + j], b[12 + j].
    for (j, &bj) in b.iter().enumerate().take(4) {
        let even_lo = _mm512_shuffle_f32x4::<0x88>(bj, b[4 + j]);
        let even_hi = _mm512_shuffle_f32x4::<0x88>(b[8 + j], b[12 + j]);
        let odd_lo = _mm512_shuffle_f32x4::<0xDD>(bj, b[4 + j]);
        let odd_hi = _mm512_shuffle_f32x4::<0xDD>(b[8 + j], b[12 + j]);
        let cols = [
            (j, _mm512_shuffle_f32x4::<0x88>(even_lo, even_hi)),
            (8 + j, _mm512_shuffle_f32x4::<0xDD>(even_lo, even_hi)),
            (4 + j, _mm512_shuffle_f32x4::<0x88>(odd_lo, odd_hi)),
            (12 + j, _mm512_shuffle_f32x4::<0xDD>(odd_lo, odd_hi)),
        ];
        for (n, v) in cols {
            // SAFETY: `out[n0 + n]` holds 32 floats and r0 + 16 <= 32.
            unsafe { _mm512_storeu_ps(out[n0 + n].as_mut_ptr().add(r0), v) };
        }
    }
}

/// Writes activation row `x` (`steps` × 32 elements), split into bf16 hi and lo parts as
/// [`crate::cpu::bf16_tiles::split_bf16`] does, into slot `n` (0..16) of its B tiles: line `p`
/// of step `s`'s hi tile at `b + s · STEP_BYTES` gets the hi parts of elements `32 s + 2p`,
/// `32 s + 2p + 1` at byte `64 p + 4 n`; the lo tile, `2 · B_TILE_BYTES` further, the lo
/// parts.
///
/// # Safety
/// The CPU has AVX-512 F/BW; `x` holds `steps · 32` floats; the tiles at `b + s · STEP_BYTES`
/// and `b + s · STEP_BYTES + 2 · B_TILE_BYTES` for `s < steps` are writable (1024 bytes each).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn pack_row(x: *const f32, steps: usize, b: *mut u8, n: usize) {
    let lines = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(64),
    );
    for s in 0..steps {
        // SAFETY: elements 32 s..32 s + 32 of `x`, and the 16 lines of step s's hi and lo
        // tiles (the caller's contract).
        unsafe {
            let (hi0, lo0) = split(_mm512_loadu_ps(x.add(32 * s)));
            let (hi1, lo1) = split(_mm512_loadu_ps(x.add(32 * s + 16)));
            let dst = b.add(s * STEP_BYTES + 4 * n);
            let hi = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(hi0), hi1);
            _mm512_i32scatter_epi32::<1>(dst.cast(), lines, hi);
            let lo = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo0), lo1);
            _mm512_i32scatter_epi32::<1>(dst.add(2 * B_TILE_BYTES).cast(), lines, lo);
        }
    }
}

/// 16 `f32` split into bf16 hi and lo parts (as 16 `u16` each): hi = bf16(x), lo = bf16(x −
/// hi), lo = 0 where x − hi is NaN (x not finite).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn split(v: __m512) -> (__m256i, __m256i) {
    let hi = bf16_bits(v);
    let hi_f = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hi)));
    let d = _mm512_sub_ps(v, hi_f);
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(d, d);
    (
        hi,
        bf16_bits(_mm512_mask_mov_ps(d, nan, _mm512_setzero_ps())),
    )
}

/// 16 `f32` rounded to bf16 (nearest, ties to even; NaN stays NaN, quiet), as 16 `u16`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn bf16_bits(v: __m512) -> __m256i {
    let bits = _mm512_castps_si512(v);
    let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(1));
    let bias = _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd);
    let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(bits, bias));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
    let quiet = _mm512_or_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(0x40));
    _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet))
}
