//! [`Lanes`]: one SIMD register of `W` f32 lanes per ISA, the vocabulary of the tiled
//! micro-kernels in [`super::tile`] and [`super::decode`]. The portable [`ScalarVec`] version
//! is a plain `[f32; 8]` (unfused multiply-add).

use super::elem::KvElem;
use crate::cpu::ops::vmath;

/// A register of [`Lanes::W`] f32 lanes, and the tile shapes that fit the register file.
///
/// # Safety
/// Implementations may use SIMD instructions: callers must run on a CPU with the
/// implementation's target features, from code compiled with them (so they inline).
/// Pointer arguments must be valid for the `W` values (or one value) they name.
pub(super) trait Lanes {
    type R: Copy;
    /// Lanes per register.
    const W: usize;

    unsafe fn zero() -> Self::R;
    unsafe fn splat(x: f32) -> Self::R;
    /// `W` floats at `p` (any alignment).
    unsafe fn load(p: *const f32) -> Self::R;
    /// `W` floats to `p` (any alignment).
    unsafe fn store(p: *mut f32, v: Self::R);
    /// `a · b + c` (fused where the ISA has FMA).
    unsafe fn fma(a: Self::R, b: Self::R, c: Self::R) -> Self::R;
    unsafe fn mul(a: Self::R, b: Self::R) -> Self::R;
    unsafe fn add(a: Self::R, b: Self::R) -> Self::R;
    unsafe fn sub(a: Self::R, b: Self::R) -> Self::R;
    /// Lane-wise maximum (of non-NaN values).
    unsafe fn max(a: Self::R, b: Self::R) -> Self::R;
    /// `e^x` lane-wise, as [`vmath::exp`] (a NaN lane gives `e^−87.3`).
    unsafe fn exp(x: Self::R) -> Self::R;
    /// `x`, with 0 in the lanes where `key` is −∞.
    unsafe fn zero_where_neg_inf(key: Self::R, x: Self::R) -> Self::R;
    /// `W` stored values of format `E` at `p`, widened to f32 (unscaled).
    unsafe fn load_elem<E: KvElem>(p: *const u8) -> Self::R;

    /// `s = K · Qᵀ` for one block (see [`super::tile::scores`]), with this ISA's tile shape.
    unsafe fn scores(t: &super::tile::ScoreArgs);
    /// `acc = acc · corr + P · V` for one block of f32 value rows (see [`super::tile::pv`]),
    /// with this ISA's tile shape.
    unsafe fn pv(t: &super::tile::PvArgs);
}

/// The portable path's lanes: plain arrays, no FMA.
pub(super) struct ScalarVec;

/// Lanes of the portable path.
const SCALAR_W: usize = 8;

impl Lanes for ScalarVec {
    type R = [f32; SCALAR_W];
    const W: usize = SCALAR_W;

    #[inline(always)]
    unsafe fn zero() -> Self::R {
        [0.0; SCALAR_W]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::R {
        [x; SCALAR_W]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self::R {
        // SAFETY: the caller's contract (W floats readable at p).
        unsafe { p.cast::<Self::R>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self::R) {
        // SAFETY: the caller's contract (W floats writable at p).
        unsafe { p.cast::<Self::R>().write_unaligned(v) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self::R, b: Self::R, c: Self::R) -> Self::R {
        std::array::from_fn(|i| a[i] * b[i] + c[i])
    }
    #[inline(always)]
    unsafe fn mul(a: Self::R, b: Self::R) -> Self::R {
        std::array::from_fn(|i| a[i] * b[i])
    }
    #[inline(always)]
    unsafe fn add(a: Self::R, b: Self::R) -> Self::R {
        std::array::from_fn(|i| a[i] + b[i])
    }
    #[inline(always)]
    unsafe fn sub(a: Self::R, b: Self::R) -> Self::R {
        std::array::from_fn(|i| a[i] - b[i])
    }
    #[inline(always)]
    unsafe fn max(a: Self::R, b: Self::R) -> Self::R {
        std::array::from_fn(|i| if a[i] > b[i] { a[i] } else { b[i] })
    }
    #[inline(always)]
    unsafe fn exp(x: Self::R) -> Self::R {
        x.map(|v| vmath::exp::<false>(if v.is_nan() { vmath::EXP_LO } else { v }))
    }
    #[inline(always)]
    unsafe fn zero_where_neg_inf(key: Self::R, x: Self::R) -> Self::R {
        std::array::from_fn(|i| {
            if key[i] == f32::NEG_INFINITY {
                0.0
            } else {
                x[i]
            }
        })
    }
    #[inline(always)]
    unsafe fn load_elem<E: KvElem>(p: *const u8) -> Self::R {
        // SAFETY: the caller's contract (W stored values readable at p).
        std::array::from_fn(|i| unsafe { E::get(p, i) })
    }
    #[inline(always)]
    unsafe fn scores(t: &super::tile::ScoreArgs) {
        // SAFETY: the caller's contract.
        unsafe { super::tile::scores::<Self, 1, 4>(t) }
    }
    #[inline(always)]
    unsafe fn pv(t: &super::tile::PvArgs) {
        // SAFETY: the caller's contract.
        unsafe { super::tile::pv::<Self, super::elem::F32Row, 2, 2>(t) }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use super::super::elem::F32Row;
    use super::super::tile::{self, PvArgs, ScoreArgs};
    use super::{KvElem, Lanes};
    use crate::cpu::ops::vmath::{EXP_HI, EXP_LO, EXP_MAGIC as MAGIC, EXP_POLY, LN2_HI, LN2_LO};

    /// AVX2 + FMA + F16C, 8 lanes.
    pub(crate) struct Avx2;

    /// AVX-512F (+ AVX2/FMA/F16C), 16 lanes.
    pub(crate) struct Avx512;

    impl Lanes for Avx2 {
        type R = __m256;
        const W: usize = 8;

        #[inline(always)]
        unsafe fn zero() -> __m256 {
            // SAFETY: AVX is the caller's contract.
            unsafe { _mm256_setzero_ps() }
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m256 {
            // SAFETY: AVX is the caller's contract.
            unsafe { _mm256_set1_ps(x) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m256 {
            // SAFETY: the caller's contract.
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m256) {
            // SAFETY: the caller's contract.
            unsafe { _mm256_storeu_ps(p, v) }
        }
        #[inline(always)]
        unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
            // SAFETY: FMA is the caller's contract.
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        unsafe fn mul(a: __m256, b: __m256) -> __m256 {
            // SAFETY: AVX is the caller's contract.
            unsafe { _mm256_mul_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn add(a: __m256, b: __m256) -> __m256 {
            // SAFETY: AVX is the caller's contract.
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn sub(a: __m256, b: __m256) -> __m256 {
            // SAFETY: AVX is the caller's contract.
            unsafe { _mm256_sub_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn max(a: __m256, b: __m256) -> __m256 {
            // SAFETY: AVX is the caller's contract.
            unsafe { _mm256_max_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn exp(x: __m256) -> __m256 {
            // SAFETY: AVX2/FMA are the caller's contract.
            unsafe {
                // max(x, lo) returns lo for a NaN x.
                let x = _mm256_min_ps(
                    _mm256_max_ps(x, _mm256_set1_ps(EXP_LO)),
                    _mm256_set1_ps(EXP_HI),
                );
                let magic = _mm256_set1_ps(MAGIC);
                let t = _mm256_fmadd_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E), magic);
                let n_bits = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic));
                let n = _mm256_sub_ps(t, magic);
                let r = _mm256_fmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
                let r = _mm256_fmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
                let mut p = _mm256_set1_ps(EXP_POLY[0]);
                for &c in &EXP_POLY[1..] {
                    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
                }
                let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(n_bits, _mm256_set1_epi32(127)));
                _mm256_mul_ps(p, _mm256_castsi256_ps(e))
            }
        }
        #[inline(always)]
        unsafe fn zero_where_neg_inf(key: __m256, x: __m256) -> __m256 {
            // SAFETY: AVX is the caller's contract.
            unsafe {
                let keep = _mm256_cmp_ps::<_CMP_NEQ_UQ>(key, _mm256_set1_ps(f32::NEG_INFINITY));
                _mm256_and_ps(x, keep)
            }
        }
        #[inline(always)]
        unsafe fn load_elem<E: KvElem>(p: *const u8) -> __m256 {
            // SAFETY: the caller's contract.
            unsafe { E::load8(p) }
        }
        #[inline(always)]
        unsafe fn scores(t: &ScoreArgs) {
            // SAFETY: the caller's contract. 2 row registers × 4 keys: 8 accumulators.
            unsafe { tile::scores::<Self, 2, 4>(t) }
        }
        #[inline(always)]
        unsafe fn pv(t: &PvArgs) {
            // SAFETY: the caller's contract. 2 rows × 4 column registers: 8 accumulators.
            unsafe { tile::pv::<Self, F32Row, 2, 4>(t) }
        }
    }

    impl Lanes for Avx512 {
        type R = __m512;
        const W: usize = 16;

        #[inline(always)]
        unsafe fn zero() -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe { _mm512_setzero_ps() }
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe { _mm512_set1_ps(x) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m512 {
            // SAFETY: the caller's contract.
            unsafe { _mm512_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m512) {
            // SAFETY: the caller's contract.
            unsafe { _mm512_storeu_ps(p, v) }
        }
        #[inline(always)]
        unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        unsafe fn mul(a: __m512, b: __m512) -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe { _mm512_mul_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn add(a: __m512, b: __m512) -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe { _mm512_add_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn sub(a: __m512, b: __m512) -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe { _mm512_sub_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn max(a: __m512, b: __m512) -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe { _mm512_max_ps(a, b) }
        }
        #[inline(always)]
        unsafe fn exp(x: __m512) -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe {
                // max(x, lo) returns lo for a NaN x.
                let x = _mm512_min_ps(
                    _mm512_max_ps(x, _mm512_set1_ps(EXP_LO)),
                    _mm512_set1_ps(EXP_HI),
                );
                let magic = _mm512_set1_ps(MAGIC);
                let t = _mm512_fmadd_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E), magic);
                let n_bits = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic));
                let n = _mm512_sub_ps(t, magic);
                let r = _mm512_fmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
                let r = _mm512_fmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
                let mut p = _mm512_set1_ps(EXP_POLY[0]);
                for &c in &EXP_POLY[1..] {
                    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
                }
                let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(n_bits, _mm512_set1_epi32(127)));
                _mm512_mul_ps(p, _mm512_castsi512_ps(e))
            }
        }
        #[inline(always)]
        unsafe fn zero_where_neg_inf(key: __m512, x: __m512) -> __m512 {
            // SAFETY: AVX-512F is the caller's contract.
            unsafe {
                let keep =
                    _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(key, _mm512_set1_ps(f32::NEG_INFINITY));
                _mm512_maskz_mov_ps(keep, x)
            }
        }
        #[inline(always)]
        unsafe fn load_elem<E: KvElem>(p: *const u8) -> __m512 {
            // SAFETY: the caller's contract.
            unsafe { E::load16(p) }
        }
        #[inline(always)]
        unsafe fn scores(t: &ScoreArgs) {
            // SAFETY: the caller's contract. 3 row registers × 8 keys: 24 accumulators.
            unsafe { tile::scores::<Self, 3, 8>(t) }
        }
        #[inline(always)]
        unsafe fn pv(t: &PvArgs) {
            // SAFETY: the caller's contract. 4 rows × 4 column registers: 16 accumulators.
            unsafe { tile::pv::<Self, F32Row, 4, 4>(t) }
        }
    }
}
