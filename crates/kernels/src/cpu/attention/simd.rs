//! Vector operations of the per-row attention path (units with few query rows on the portable
//! path, see [`super::run_unit`]) on stored head rows, read in place through [`KvElem`]: the
//! score `q · k` and the weighted sum `acc += Σ_j p_j · v_j`.

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
