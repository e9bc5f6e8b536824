//! Segmented products: the rows of one input split into segments, each multiplied by its own
//! matrices (a mixture-of-experts layer's experts over the tokens routed to them), in one pool
//! call.
//!
//! ```text
//!   x rows:   [ seg 0 (expert 3) | seg 1 (expert 5) | seg 2 (expert 6) ]   quantized once
//!   slot k:   y_k[seg s rows] = x[seg s rows] · W_{s,k}ᵀ    (gate and up: N = 2 slots)
//! ```
//!
//! The work is cut into units of one weight panel against one chunk of at most `ACT_CHUNK` rows
//! of one segment. Chunks go in rounds (round `r` is every segment's `r`-th chunk); each round's
//! units are shared out over the threads by cost, so small segments and small matrices cost one
//! wake-up between them, and a segment with many rows is balanced against one with few. Plain
//! products (one input, no segments) keep their own loop in `matmul_packed_many_with`.

use std::ops::Range;

use super::{pack_acts, panel_rows, LineOut, PackedMatrix, PanelFn, ACT_CHUNK, PANEL};
use crate::cpu::gemm::Scratch;
use crate::cpu::threadpool::SharedMut;
use crate::cpu::ThreadPool;

/// Activation rows a panel's weight read is worth when costing units: a unit of `r` rows over
/// `b` blocks costs `b · (r + READ_COST_ROWS)`, so decode units (one row) are weighed by their
/// bytes and prefill units by their rows.
const READ_COST_ROWS: usize = 4;

/// The matrices of one segment, one per slot.
pub type SegmentWeights<'w, const N: usize> = dyn Fn(usize) -> [&'w PackedMatrix; N] + Sync + 'w;

/// `y_k[rows of s] = x[rows of s] · W_{s,k}ᵀ` for every segment `s` (rows
/// `offsets[s]..offsets[s + 1]`, `offsets[0] = 0`, last = all of `x`'s rows) and slot
/// `k < N`, with `W_{s,k} = weights(s)[k]`.
///
/// Every segment's slot-`k` matrix has the same shape; all the matrices have the same kind
/// and column count (they read one quantized input). `x` is `m × cols`, `y_k` is
/// `m × rows_k`.
pub fn matmul_packed_segments_with<'w, const N: usize>(
    pool: &ThreadPool,
    kernel: PanelFn,
    weights: &SegmentWeights<'w, N>,
    offsets: &[usize],
    x: &[f32],
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
) {
    if offsets.len() < 2 {
        return;
    }
    let first = weights(0);
    let Some(w0) = first.first() else { return };
    check_shapes(weights, offsets, &first, x, &ys);
    let m = offsets[offsets.len() - 1];
    if m == 0 {
        return;
    }
    pack_acts(pool, kernel, w0, x, m, scratch);
    let acts = &scratch.packed;
    let outs = ys.map(SharedMut::new);
    let dims = first.map(|w| (w.rows() / PANEL, w.blocks()));
    let plan = Plan { offsets, dims };
    pool.broadcast(&|t, n| {
        let mut tile = LineOut::new();
        for round in 0..plan.rounds() {
            plan.for_units(round, t, n, |seg, k, rows, panels| {
                let w = weights(seg)[k];
                for p in panels {
                    panel_rows(kernel, w, acts, p, rows.clone(), &outs[k], &mut tile.0);
                }
            });
        }
    });
}

/// Asserts the shapes the product needs (a wrong shape is a caller's bug).
fn check_shapes<const N: usize>(
    weights: &SegmentWeights<'_, N>,
    offsets: &[usize],
    first: &[&PackedMatrix; N],
    x: &[f32],
    ys: &[&mut [f32]; N],
) {
    let m = offsets.last().copied().unwrap_or(0);
    let w0 = first[0];
    assert!(
        offsets.first() == Some(&0) && offsets.windows(2).all(|o| o[0] <= o[1]),
        "matmul_packed_segments: offsets must rise from 0"
    );
    assert_eq!(x.len(), m * w0.cols(), "matmul_packed: x must be m × cols");
    for (w, y) in first.iter().zip(ys) {
        assert_eq!(y.len(), m * w.rows(), "matmul_packed: y must be m × rows");
    }
    for s in 0..offsets.len() - 1 {
        let ws = weights(s);
        let same = ws
            .iter()
            .zip(first)
            .all(|(w, f)| w.kind() == w0.kind() && w.cols() == w0.cols() && w.rows() == f.rows());
        assert!(same, "matmul_packed_segments: kinds or shapes differ");
    }
}

/// How a segmented product's units are shared out.
struct Plan<'a, const N: usize> {
    offsets: &'a [usize],
    /// Panels and blocks per row of each slot's matrices.
    dims: [(usize, usize); N],
}

impl<const N: usize> Plan<'_, N> {
    /// Chunk rounds: the most chunks any segment has.
    fn rounds(&self) -> usize {
        self.offsets
            .windows(2)
            .map(|o| (o[1] - o[0]).div_ceil(ACT_CHUNK))
            .max()
            .unwrap_or(0)
    }

    /// Rows of segment `seg` in chunk round `round` (empty past its end).
    fn chunk(&self, seg: usize, round: usize) -> Range<usize> {
        let (start, end) = (self.offsets[seg], self.offsets[seg + 1]);
        let lo = (start + round * ACT_CHUNK).min(end);
        lo..(lo + ACT_CHUNK).min(end)
    }

    /// Calls `f(segment, slot, rows, panels)` for thread `t`'s share (of `n`) of round
    /// `round`: the units whose cost falls in `[T·t/n, T·(t+1)/n)` of the round's total `T`,
    /// units counted segment by segment, slot by slot, panel by panel.
    fn for_units(
        &self,
        round: usize,
        t: usize,
        n: usize,
        mut f: impl FnMut(usize, usize, Range<usize>, Range<usize>),
    ) {
        let segs = self.offsets.len() - 1;
        let unit = |rows: &Range<usize>, blocks: usize| blocks * (rows.len() + READ_COST_ROWS);
        let mut total = 0;
        for seg in 0..segs {
            let rows = self.chunk(seg, round);
            if !rows.is_empty() {
                total += self
                    .dims
                    .iter()
                    .map(|&(p, b)| p * unit(&rows, b))
                    .sum::<usize>();
            }
        }
        let (lo, hi) = (total * t / n, total * (t + 1) / n);
        let mut start = 0;
        for seg in 0..segs {
            let rows = self.chunk(seg, round);
            if rows.is_empty() {
                continue;
            }
            for (k, &(panels, blocks)) in self.dims.iter().enumerate() {
                let u = unit(&rows, blocks);
                // Units i of this run start at `start + i·u`: those in [lo, hi) are ours.
                let first = lo.saturating_sub(start).div_ceil(u).min(panels);
                let last = hi.saturating_sub(start).div_ceil(u).min(panels);
                if first < last {
                    f(seg, k, rows.clone(), first..last);
                }
                start += panels * u;
            }
        }
    }
}
