//! Row-wise steps of a layer (norms, rotary positions, gated activations, residual adds)
//! shared out over the pool for a prefill-sized batch: every row is independent, and on the
//! calling thread alone they would leave the other threads waiting between matrix products.

use kestrel_kernels::cpu::ThreadPool;

/// Batches with fewer rows run row-wise steps on the calling thread (less work than waking
/// the pool costs).
pub(crate) const PARALLEL_ROWS: usize = 64;

/// `f(out_rows, x_rows)` over matching shares of the `width`-long rows of `out` and `x`.
pub(crate) fn zip_rows(
    pool: &ThreadPool,
    out: &mut [f32],
    x: &[f32],
    width: usize,
    f: &(dyn Fn(&mut [f32], &[f32]) + Sync),
) {
    assert_eq!(out.len(), x.len(), "zip_rows: out and x must match");
    pool.for_rows(out, width, PARALLEL_ROWS, &|first, part| {
        f(part, &x[first * width..first * width + part.len()])
    });
}
