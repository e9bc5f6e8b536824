//! The AVX512-BF16 kernel of [`crate::cpu::bf16_tiles`]: up to [`W_ROWS`] BF16 weight rows
//! against up to [`A_ROWS`] activation rows split into bf16 hi and lo parts, in `vdpbf16ps`
//! products (16 `f32` lanes, each adding a pair of products) with one accumulator register
//! per (weight row, activation row).
//!
//! ```text
//!   weights:     read in place, 64 bytes (32 elements) of each of the R rows per step
//!   activations: per row and step, 64 bytes of hi parts then 64 bytes of lo parts
//!                ([`pack_row`]; the pairs of each part line up with the weight pairs)
//!   a step:      R weight loads, 2 J activation loads, 2 R J vdpbf16ps (hi, then lo, into
//!                the same accumulator): 4 × 6 → 24 accumulators + 4 + 2 registers of 32
//!   the end:     each accumulator's 16 lanes summed (four at a time, [`hsum4`])
//! ```
//!
//! Weights read in place need no repacking: a step's 64 bytes of a row are one load, and the
//! pairs `vdpbf16ps` multiplies are consecutive elements of both operands. (A pairwise
//! repacking, the layout of a broadcast-operand kernel, would trade these loads for one
//! broadcast per activation row and part, and cost a copy of every weight per product.)

use std::arch::x86_64::*;

use super::amx::bf16::split;

/// Weight rows of a register tile.
pub(crate) const W_ROWS: usize = 4;

/// Activation rows of a register tile.
pub(crate) const A_ROWS: usize = 6;

/// Elements of K per step.
pub(crate) const K_STEP: usize = 32;

/// Bytes of one packed activation row per step: 64 of hi parts, 64 of lo parts.
pub(crate) const STEP_BYTES: usize = 128;

/// `out[j][r] = Σ_k W[r][k] · (hi + lo)(x[j][k])` for `r < R`, `j < J`: the `R` weight rows
/// at `w` (`w_stride` bytes apart) against the `J` packed activation rows at `a` (`a_stride`
/// bytes apart), `steps` steps of 32 elements each.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and AVX512-BF16; each weight row holds `64 · steps` readable
/// bytes and each activation row `STEP_BYTES · steps`.
#[inline]
#[allow(clippy::needless_range_loop)] // index loops keep the register tile closure-free
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")]
pub(crate) unsafe fn tile<const R: usize, const J: usize>(
    w: *const u8,
    w_stride: usize,
    a: *const u8,
    a_stride: usize,
    steps: usize,
) -> [[f32; W_ROWS]; J] {
    // Plain index loops (no closures): the tile must inline into one loop body whatever the
    // codegen units decide.
    let mut acc = [[_mm512_setzero_ps(); R]; J];
    let zero = _mm512_setzero_ps();
    // SAFETY: 64 zero bytes are a valid `__m512bh`.
    let mut wv: [__m512bh; R] = [unsafe { std::mem::transmute::<__m512, __m512bh>(zero) }; R];
    for s in 0..steps {
        for r in 0..R {
            // SAFETY: step s of weight row r lies within its `64 · steps` bytes.
            wv[r] = unsafe { load_bh(w.add(r * w_stride + 64 * s)) };
        }
        for j in 0..J {
            // SAFETY: step s of activation row j: hi parts, then lo parts, within its
            // `STEP_BYTES · steps` bytes.
            let (hi, lo) = unsafe {
                let p = a.add(j * a_stride + STEP_BYTES * s);
                (load_bh(p), load_bh(p.add(64)))
            };
            for r in 0..R {
                acc[j][r] = _mm512_dpbf16_ps(acc[j][r], wv[r], hi);
                acc[j][r] = _mm512_dpbf16_ps(acc[j][r], wv[r], lo);
            }
        }
    }
    let mut out = [[0.0; W_ROWS]; J];
    for j in 0..J {
        let mut v = [zero; W_ROWS];
        v[..R].copy_from_slice(&acc[j]);
        // SAFETY: `out[j]` holds 4 floats.
        unsafe { _mm_storeu_ps(out[j].as_mut_ptr(), hsum4(v)) };
    }
    out
}

/// 32 bf16 values at `p`.
///
/// # Safety
/// 64 bytes at `p` are readable; the CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn load_bh(p: *const u8) -> __m512bh {
    // SAFETY: the caller's contract; `__m512bh` is 64 bytes of 32 bf16 values, any bits valid.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(p.cast())) }
}

/// The lane sums of four vectors: `[Σ v[0], Σ v[1], Σ v[2], Σ v[3]]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn hsum4(v: [__m512; 4]) -> __m128 {
    // Per 128-bit lane: t01 = (v0, v1, v0, v1) partial sums, t23 = (v2, v3, v2, v3).
    let t01 = _mm512_add_ps(
        _mm512_unpacklo_ps(v[0], v[1]),
        _mm512_unpackhi_ps(v[0], v[1]),
    );
    let t23 = _mm512_add_ps(
        _mm512_unpacklo_ps(v[2], v[3]),
        _mm512_unpackhi_ps(v[2], v[3]),
    );
    // Per 128-bit lane: (v0, v1, v2, v3) partial sums.
    let (a, b) = (_mm512_castps_pd(t01), _mm512_castps_pd(t23));
    let u = _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
        _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)),
    );
    let h = _mm256_add_ps(
        _mm512_castps512_ps256(u),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(u))),
    );
    _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
}

/// Writes activation row `x` (`steps` × 32 elements) split into bf16 hi and lo parts as
/// [`crate::cpu::bf16_tiles::split_bf16`] does: step `s` at `dst + STEP_BYTES · s`, 32 hi
/// parts then 32 lo parts.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL; `x` holds `steps · 32` floats and `dst` `steps · STEP_BYTES`
/// writable bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn pack_row(x: *const f32, steps: usize, dst: *mut u8) {
    for s in 0..steps {
        // SAFETY: elements 32 s..32 s + 32 of `x`, bytes STEP_BYTES · s.. of `dst` (the
        // caller's contract).
        unsafe {
            let (hi0, lo0) = split(_mm512_loadu_ps(x.add(32 * s)));
            let (hi1, lo1) = split(_mm512_loadu_ps(x.add(32 * s + 16)));
            let d = dst.add(STEP_BYTES * s);
            let hi = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(hi0), hi1);
            let lo = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo0), lo1);
            _mm512_storeu_si512(d.cast(), hi);
            _mm512_storeu_si512(d.add(64).cast(), lo);
        }
    }
}
