//! Per-ISA vector operations of the attention kernel on stored head rows, read in place
//! through [`KvElem`] (f32 loads, F16C half → float conversion, or int8 → float times the
//! row's scale): the score `q · k` and the weighted sum `acc += Σ_j p_j · v_j`.

use super::elem::KvElem;
use crate::cpu::ops::vmath;

/// Scores and weighted sums over stored head rows.
///
/// # Safety
/// Implementations may use SIMD instructions: callers must run on a CPU with the
/// implementation's target features, from code compiled with them (so they inline).
pub(super) trait VecOps {
    /// `q · k` for the stored row `row` of `q.len()` values (its scale applied).
    unsafe fn dot<E: KvElem>(q: &[f32], row: &[u8]) -> f32;

    /// `acc += Σ_j p[j] · row_j`, where stored row `j` starts at byte `j · stride` of `v`.
    unsafe fn weighted_sum<E: KvElem>(acc: &mut [f32], p: &[f32], v: &[u8], stride: usize);
}

/// Panics unless `row` holds a whole stored row of `n` values.
#[inline(always)]
fn check_row<E: KvElem>(n: usize, row: &[u8]) {
    assert!(
        E::OFFSET + n * E::SIZE <= row.len(),
        "attention: head row out of bounds"
    );
}

/// Panics unless `v` holds `rows` stored rows of `n` values, `stride` bytes apart.
#[inline(always)]
fn check_rows<E: KvElem>(n: usize, rows: usize, v: &[u8], stride: usize) {
    assert!(
        rows == 0 || (rows - 1) * stride + E::OFFSET + n * E::SIZE <= v.len(),
        "attention: head rows out of bounds"
    );
}

/// Portable code, no FMA: stored values are widened [`CHUNK`] at a time into a stack buffer,
/// then the f32 math of `vmath` runs on it.
pub(super) struct ScalarVec;

/// Values [`ScalarVec`] widens per step.
const CHUNK: usize = 16;

/// Values `i0..i0 + out.len()` (unscaled) of the row values at `d` into `out`.
///
/// # Safety
/// Those values are readable at `d`.
#[inline(always)]
unsafe fn widen<E: KvElem>(d: *const u8, i0: usize, out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: the caller's contract.
        *o = unsafe { E::get(d, i0 + i) };
    }
}

impl VecOps for ScalarVec {
    #[inline(always)]
    unsafe fn dot<E: KvElem>(q: &[f32], row: &[u8]) -> f32 {
        check_row::<E>(q.len(), row);
        let d = row[E::OFFSET..].as_ptr();
        let mut buf = [0.0f32; CHUNK];
        let mut total = 0.0;
        for (c, qc) in q.chunks(CHUNK).enumerate() {
            let k = &mut buf[..qc.len()];
            // SAFETY: values c·CHUNK.. + qc.len() ≤ q.len() are in bounds (`check_row`).
            unsafe { widen::<E>(d, c * CHUNK, k) };
            total += vmath::dot::<false, 4>(qc, k);
        }
        // SAFETY: `row` starts with its header (checked).
        total * unsafe { E::scale(row.as_ptr()) }
    }

    #[inline(always)]
    unsafe fn weighted_sum<E: KvElem>(acc: &mut [f32], p: &[f32], v: &[u8], stride: usize) {
        check_rows::<E>(acc.len(), p.len(), v, stride);
        let mut buf = [0.0f32; CHUNK];
        for (j, &pj) in p.iter().enumerate() {
            let row = v[j * stride..].as_ptr();
            // SAFETY: row j's header is in bounds (`check_rows`).
            let (w, d) = unsafe { (pj * E::scale(row), row.add(E::OFFSET)) };
            for (c, ac) in acc.chunks_mut(CHUNK).enumerate() {
                let x = &mut buf[..ac.len()];
                // SAFETY: row j's values c·CHUNK.. + ac.len() ≤ acc.len() are in bounds.
                unsafe { widen::<E>(d, c * CHUNK, x) };
                vmath::axpy::<false>(ac, w, x);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86vec {
    use std::arch::x86_64::*;

    use super::{check_row, check_rows, KvElem, VecOps};

    /// AVX2 + FMA + F16C, 8 lanes.
    pub(crate) struct Avx2;

    impl VecOps for Avx2 {
        #[inline(always)]
        unsafe fn dot<E: KvElem>(q: &[f32], row: &[u8]) -> f32 {
            check_row::<E>(q.len(), row);
            // SAFETY: the row's header and `q.len()` values are in bounds (checked);
            // AVX2/FMA/F16C availability is the caller's contract.
            unsafe { dot_avx2::<E>(q, row.as_ptr().add(E::OFFSET)) * E::scale(row.as_ptr()) }
        }

        #[inline(always)]
        unsafe fn weighted_sum<E: KvElem>(acc: &mut [f32], p: &[f32], v: &[u8], stride: usize) {
            check_rows::<E>(acc.len(), p.len(), v, stride);
            // SAFETY: rows checked above; features: the caller's contract.
            unsafe { weighted_sum_avx2::<E>(acc, 0, p, v.as_ptr(), stride) }
        }
    }

    /// `Σ a[i] · value_i` over the `a.len()` (unscaled) values stored at `d`.
    ///
    /// # Safety
    /// `a.len()` values at `d` are readable; AVX2/FMA/F16C are available.
    #[inline(always)]
    unsafe fn dot_avx2<E: KvElem>(a: &[f32], d: *const u8) -> f32 {
        let (n, pa) = (a.len(), a.as_ptr());
        // SAFETY: every load covers 8 values at i with i + 8 ≤ n; the tail reads value j < n.
        unsafe {
            let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i + 16 <= n {
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), E::load8(d.add(i * E::SIZE)), s0);
                let (a1, d1) = (pa.add(i + 8), d.add((i + 8) * E::SIZE));
                s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1), E::load8(d1), s1);
                i += 16;
            }
            if i + 8 <= n {
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), E::load8(d.add(i * E::SIZE)), s0);
                i += 8;
            }
            let s = _mm256_add_ps(s0, s1);
            let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_movehdup_ps(h));
            let mut total = _mm_cvtss_f32(h);
            for (j, &aj) in a.iter().enumerate().skip(i) {
                total = aj.mul_add(E::get(d, j), total);
            }
            total
        }
    }

    /// Columns `c0..acc.len()` of `acc += Σ_j p[j]·row_j` (rows at `v + j·stride`), keeping
    /// 32 (then 8) columns of `acc` in registers across all rows.
    ///
    /// # Safety
    /// `p.len()` whole rows of `acc.len()` values are readable at `v`, `stride` bytes apart;
    /// AVX2/FMA/F16C are available.
    #[inline(always)]
    unsafe fn weighted_sum_avx2<E: KvElem>(
        acc: &mut [f32],
        c0: usize,
        p: &[f32],
        v: *const u8,
        stride: usize,
    ) {
        let (hd, pacc) = (acc.len(), acc.as_mut_ptr());
        let mut c = c0;
        // SAFETY: row j's values c..c+W (c + W ≤ hd) lie inside row j (the contract); acc
        // accesses are c..c+W ≤ hd.
        unsafe {
            while c + 32 <= hd {
                columns_avx2::<E, 4>(pacc.add(c), c, p, v, stride);
                c += 32;
            }
            while c + 8 <= hd {
                columns_avx2::<E, 1>(pacc.add(c), c, p, v, stride);
                c += 8;
            }
            for (j, &pj) in p.iter().enumerate() {
                let row = v.add(j * stride);
                let w = pj * E::scale(row);
                for (i, a) in acc.iter_mut().enumerate().skip(c) {
                    *a = w.mul_add(E::get(row.add(E::OFFSET), i), *a);
                }
            }
        }
    }

    /// `8·R` columns starting at column `c` (accumulators at `pacc`) of the weighted sum.
    ///
    /// # Safety
    /// As [`weighted_sum_avx2`], for columns `c..c + 8·R`.
    #[inline(always)]
    unsafe fn columns_avx2<E: KvElem, const R: usize>(
        pacc: *mut f32,
        c: usize,
        p: &[f32],
        v: *const u8,
        stride: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut r = [0; R].map(|_| _mm256_setzero_ps());
            for (k, reg) in r.iter_mut().enumerate() {
                *reg = _mm256_loadu_ps(pacc.add(8 * k));
            }
            for (j, &pj) in p.iter().enumerate() {
                let row = v.add(j * stride);
                let w = _mm256_set1_ps(pj * E::scale(row));
                let d = row.add(E::OFFSET + c * E::SIZE);
                for (k, reg) in r.iter_mut().enumerate() {
                    *reg = _mm256_fmadd_ps(w, E::load8(d.add(8 * k * E::SIZE)), *reg);
                }
            }
            for (k, reg) in r.iter().enumerate() {
                _mm256_storeu_ps(pacc.add(8 * k), *reg);
            }
        }
    }

    /// AVX-512F, 16 lanes (tails go to the AVX2 code).
    pub(crate) struct Avx512;

    impl VecOps for Avx512 {
        #[inline(always)]
        unsafe fn dot<E: KvElem>(q: &[f32], row: &[u8]) -> f32 {
            check_row::<E>(q.len(), row);
            let (n, pa) = (q.len(), q.as_ptr());
            // SAFETY: the row's header and `n` values are in bounds (checked); every load
            // covers 16 values at i with i + 16 ≤ n, the tail goes to the AVX2 version.
            // AVX-512F (and AVX2/FMA/F16C) availability is the caller's contract.
            unsafe {
                let d = row.as_ptr().add(E::OFFSET);
                let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                let mut i = 0;
                while i + 32 <= n {
                    let (a1, d1) = (pa.add(i + 16), d.add((i + 16) * E::SIZE));
                    s0 = _mm512_fmadd_ps(
                        _mm512_loadu_ps(pa.add(i)),
                        E::load16(d.add(i * E::SIZE)),
                        s0,
                    );
                    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a1), E::load16(d1), s1);
                    i += 32;
                }
                if i + 16 <= n {
                    s0 = _mm512_fmadd_ps(
                        _mm512_loadu_ps(pa.add(i)),
                        E::load16(d.add(i * E::SIZE)),
                        s0,
                    );
                    i += 16;
                }
                let total = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
                    + dot_avx2::<E>(&q[i..], d.add(i * E::SIZE));
                total * E::scale(row.as_ptr())
            }
        }

        #[inline(always)]
        unsafe fn weighted_sum<E: KvElem>(acc: &mut [f32], p: &[f32], v: &[u8], stride: usize) {
            check_rows::<E>(acc.len(), p.len(), v, stride);
            let (hd, pacc, pv) = (acc.len(), acc.as_mut_ptr(), v.as_ptr());
            let mut c = 0;
            // SAFETY: rows checked above; row j's values c..c+64 ≤ hd lie inside row j and
            // acc accesses are c..c+64 ≤ hd. Features: the caller's contract.
            unsafe {
                while c + 64 <= hd {
                    let mut r = [0; 4].map(|_| _mm512_setzero_ps());
                    for (k, reg) in r.iter_mut().enumerate() {
                        *reg = _mm512_loadu_ps(pacc.add(c + 16 * k));
                    }
                    for (j, &pj) in p.iter().enumerate() {
                        let row = pv.add(j * stride);
                        let w = _mm512_set1_ps(pj * E::scale(row));
                        let d = row.add(E::OFFSET + c * E::SIZE);
                        for (k, reg) in r.iter_mut().enumerate() {
                            *reg = _mm512_fmadd_ps(w, E::load16(d.add(16 * k * E::SIZE)), *reg);
                        }
                    }
                    for (k, reg) in r.iter().enumerate() {
                        _mm512_storeu_ps(pacc.add(c + 16 * k), *reg);
                    }
                    c += 64;
                }
                weighted_sum_avx2::<E>(acc, c, p, pv, stride);
            }
        }
    }
}
