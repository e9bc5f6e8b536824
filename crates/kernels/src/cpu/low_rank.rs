//! Low-rank updates of a batch's rows, `y[row] += scale · (x[row] · Aᵀ) · Bᵀ`, for several
//! groups of rows with their own `A` (`[rank, in]`) and `B` (stored transposed, `[rank, out]`):
//! the LoRA adapters of one step, each over the rows of its sequences.
//!
//! ```text
//!   down (by (group, k)):   u[i][k] = scale · x[row_i] · A[k]        rank values per row
//!   ── barrier ──
//!   up (by output columns): y[row_i][c0..c1] += Σ_k u[i][k] · Bᵀ[k][c0..c1]
//! ```
//!
//! Both phases run in one pool call, a spin barrier between them: every group and row of a
//! projection costs one wake-up. A down unit reads one row of `A` once for all the group's
//! rows; the up phase walks column tiles that keep a tile of `Bᵀ` in L1 while all the group's
//! rows use it. Storing `B` transposed makes the up product a run of `axpy`s along the output,
//! with no horizontal sums.
//!
//! [`reference`] is the spec; [`LowRankKernels::for_isa`] picks the AVX2 / AVX-512 variants.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::cpu::ops::vmath;
use crate::cpu::threadpool::SharedMut;
use crate::cpu::{Isa, ThreadPool};

/// Output columns per tile of the up product (a multiple of every SIMD width).
const TILE: usize = 256;

/// One group: the rows it updates and its matrices.
#[derive(Clone, Copy)]
pub struct LowRankGroup<'a> {
    /// Rows of `x` and `y`.
    pub rows: &'a [usize],
    /// `A`, `[rank, in]` row-major.
    pub a: &'a [f32],
    /// `Bᵀ`, `[rank, out]` row-major.
    pub bt: &'a [f32],
    pub rank: usize,
    pub scale: f32,
}

/// The per-row kernels.
#[derive(Clone, Copy)]
pub struct LowRankKernels {
    pub isa: Isa,
    /// `u[k] = scale · x · a[k]` for the `u.len()` rows `a[k]` of `a` (each `x.len()` long).
    pub down: fn(x: &[f32], a: &[f32], scale: f32, u: &mut [f32]),
    /// `y += Σ_k u[k] · bt[k·stride ..][.. y.len()]`.
    pub up: fn(y: &mut [f32], u: &[f32], bt: &[f32], stride: usize),
}

impl LowRankKernels {
    /// The fastest variants `isa` can run (capped at what this CPU supports).
    pub fn for_isa(isa: Isa) -> LowRankKernels {
        match isa.min(Isa::supported()) {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => x86::AVX2,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => x86::AVX512,
            _ => LowRankKernels {
                isa: Isa::Scalar,
                down: reference::down,
                up: reference::up,
            },
        }
    }

    /// The kernels for this CPU, chosen once.
    pub fn detected() -> &'static LowRankKernels {
        static K: OnceLock<LowRankKernels> = OnceLock::new();
        K.get_or_init(|| LowRankKernels::for_isa(Isa::detected()))
    }
}

/// Adds every group's update to its rows of `y` (`[_, out]`), reading `x` (`[_, in]`), with
/// this CPU's kernels. `groups(g)` is group `g < n_groups` (`None`: nothing to add). `u` is a
/// reused buffer.
pub fn low_rank_update<'a>(
    pool: &ThreadPool,
    groups: &(dyn Fn(usize) -> Option<LowRankGroup<'a>> + Sync),
    n_groups: usize,
    (x, in_dim): (&[f32], usize),
    (y, out_dim): (&mut [f32], usize),
    u: &mut Vec<f32>,
) {
    let k = LowRankKernels::detected();
    low_rank_update_with(pool, k, groups, n_groups, (x, in_dim), (y, out_dim), u)
}

/// [`low_rank_update`] with explicit kernels (tests cover every variant).
pub fn low_rank_update_with<'a>(
    pool: &ThreadPool,
    k: &LowRankKernels,
    groups: &(dyn Fn(usize) -> Option<LowRankGroup<'a>> + Sync),
    n_groups: usize,
    (x, in_dim): (&[f32], usize),
    (y, out_dim): (&mut [f32], usize),
    u: &mut Vec<f32>,
) {
    let mut values = 0;
    for g in (0..n_groups).filter_map(groups) {
        check(&g, x, in_dim, y.len(), out_dim);
        values += g.rows.len() * g.rank;
    }
    if values == 0 {
        return;
    }
    u.clear();
    u.resize(values, 0.0);
    let (u, out) = (SharedMut::new(u), SharedMut::new(y));
    let barrier = SpinBarrier::default();
    pool.broadcast(&|t, n| {
        {
            // Counted even if the down phase panics, so that no thread waits forever.
            let _arrival = barrier.arrive();
            down_share(k, groups, n_groups, (x, in_dim), &u, (t, n));
        }
        barrier.wait(n);
        up_share(k, groups, n_groups, &u, (&out, out_dim), (t, n));
    });
}

/// Thread `t`'s share of the down products: the `(group, k)` units
/// `[U·t/n, U·(t+1)/n)`, each `A[k]` against all the group's rows; `u` holds, group after
/// group, each row's `rank` values.
fn down_share<'a>(
    kern: &LowRankKernels,
    groups: &(dyn Fn(usize) -> Option<LowRankGroup<'a>> + Sync),
    n_groups: usize,
    (x, in_dim): (&[f32], usize),
    u: &SharedMut<'_, f32>,
    (t, n): (usize, usize),
) {
    let units: usize = (0..n_groups).filter_map(groups).map(|g| g.rank).sum();
    let mine = units * t / n..units * (t + 1) / n;
    let (mut unit, mut offset) = (0, 0);
    for g in (0..n_groups).filter_map(groups) {
        for k in 0..g.rank {
            if mine.contains(&unit) {
                let a = &g.a[k * in_dim..(k + 1) * in_dim];
                for (j, &r) in g.rows.iter().enumerate() {
                    // SAFETY: value (row j, k) of this group belongs to unit (group, k),
                    // which only thread t computes; nobody reads `u` before the barrier.
                    let dst = unsafe { u.slice_mut(offset + j * g.rank + k, 1) };
                    (kern.down)(&x[r * in_dim..(r + 1) * in_dim], a, g.scale, dst);
                }
            }
            unit += 1;
        }
        offset += g.rows.len() * g.rank;
    }
}

/// Thread `t`'s share of the up products: the output column tiles
/// `[T·t/n, T·(t+1)/n)` of every group's rows.
fn up_share<'a>(
    kern: &LowRankKernels,
    groups: &(dyn Fn(usize) -> Option<LowRankGroup<'a>> + Sync),
    n_groups: usize,
    u: &SharedMut<'_, f32>,
    (out, out_dim): (&SharedMut<'_, f32>, usize),
    (t, n): (usize, usize),
) {
    let tiles = out_dim.div_ceil(TILE);
    for tile in tiles * t / n..tiles * (t + 1) / n {
        let cols = tile * TILE..((tile + 1) * TILE).min(out_dim);
        let mut offset = 0;
        for g in (0..n_groups).filter_map(groups) {
            for &r in g.rows {
                // SAFETY: every thread has passed the barrier, so `u` is no longer written.
                let ur = unsafe { u.slice(offset, g.rank) };
                offset += g.rank;
                // SAFETY: thread t writes only the columns of its own tiles, disjoint across
                // threads, of rows inside `y` (checked); a row listed twice is updated twice
                // by the same thread, one slice after the other.
                let yr = unsafe { out.slice_mut(r * out_dim + cols.start, cols.len()) };
                (kern.up)(yr, ur, &g.bt[cols.start..], out_dim);
            }
        }
    }
}

/// Holds the threads of one broadcast until all `n` have arrived (used once).
#[derive(Default)]
struct SpinBarrier {
    arrived: AtomicUsize,
}

impl SpinBarrier {
    /// Marks this thread arrived when the returned guard drops.
    fn arrive(&self) -> Arrival<'_> {
        Arrival(&self.arrived)
    }

    /// Spins until `n` threads have arrived.
    fn wait(&self, n: usize) {
        while self.arrived.load(Ordering::Acquire) < n {
            std::hint::spin_loop();
        }
    }
}

struct Arrival<'a>(&'a AtomicUsize);

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// Asserts a group's shapes against `x` and `y` (a mismatch is a caller's bug).
fn check(g: &LowRankGroup<'_>, x: &[f32], in_dim: usize, y_len: usize, out_dim: usize) {
    assert_eq!(
        g.a.len(),
        g.rank * in_dim,
        "low_rank_update: A must be rank × in"
    );
    assert_eq!(
        g.bt.len(),
        g.rank * out_dim,
        "low_rank_update: Bᵀ must be rank × out"
    );
    for &r in g.rows {
        assert!(
            (r + 1) * in_dim <= x.len() && (r + 1) * out_dim <= y_len,
            "low_rank_update: row {r} is outside x or y"
        );
    }
}

/// The scalar spec.
pub mod reference {
    /// `u[k] = scale · Σ_c x[c] · a[k·n + c]` (`n = x.len()`).
    pub fn down(x: &[f32], a: &[f32], scale: f32, u: &mut [f32]) {
        for (k, uk) in u.iter_mut().enumerate() {
            let row = &a[k * x.len()..(k + 1) * x.len()];
            *uk = scale * row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>();
        }
    }

    /// `y[c] += Σ_k u[k] · bt[k·stride + c]`.
    pub fn up(y: &mut [f32], u: &[f32], bt: &[f32], stride: usize) {
        for (k, &uk) in u.iter().enumerate() {
            let row = &bt[k * stride..k * stride + y.len()];
            y.iter_mut().zip(row).for_each(|(v, b)| *v += uk * b);
        }
    }
}

/// The lane-structured bodies the SIMD variants compile.
mod lanes {
    use super::vmath;

    #[inline(always)]
    pub fn down<const F: bool, const L: usize>(x: &[f32], a: &[f32], scale: f32, u: &mut [f32]) {
        for (k, uk) in u.iter_mut().enumerate() {
            *uk = scale * vmath::dot::<F, L>(x, &a[k * x.len()..(k + 1) * x.len()]);
        }
    }

    /// `W` output columns at a time held in registers over all `k`: one load of `Bᵀ` per
    /// multiply-add, and `y` read and written once.
    #[inline(always)]
    pub fn up<const F: bool, const W: usize>(y: &mut [f32], u: &[f32], bt: &[f32], stride: usize) {
        let full = y.len() / W * W;
        for (c, out) in y[..full].chunks_exact_mut(W).enumerate() {
            let out: &mut [f32; W] = out.try_into().expect("chunks_exact_mut yields W");
            let mut acc = *out;
            for (k, &uk) in u.iter().enumerate() {
                let row: &[f32; W] = bt[k * stride + c * W..][..W]
                    .try_into()
                    .expect("a W-wide slice");
                for l in 0..W {
                    acc[l] = vmath::fma::<F>(uk, row[l], acc[l]);
                }
            }
            *out = acc;
        }
        let tail = y.len() - full;
        for (k, &uk) in u.iter().enumerate() {
            vmath::axpy::<F>(&mut y[full..], uk, &bt[k * stride + full..][..tail]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{lanes, LowRankKernels};
    use crate::cpu::ops::simd_entry;
    use crate::cpu::Isa;

    simd_entry!(
        down_avx2,
        "avx2,fma",
        fn(x: &[f32], a: &[f32], scale: f32, u: &mut [f32]),
        lanes::down::<true, 16>(x, a, scale, u)
    );
    simd_entry!(
        up_avx2,
        "avx2,fma",
        fn(y: &mut [f32], u: &[f32], bt: &[f32], stride: usize),
        lanes::up::<true, 32>(y, u, bt, stride)
    );
    simd_entry!(
        down_avx512,
        "avx512f,avx2,fma",
        fn(x: &[f32], a: &[f32], scale: f32, u: &mut [f32]),
        lanes::down::<true, 32>(x, a, scale, u)
    );
    simd_entry!(
        up_avx512,
        "avx512f,avx2,fma",
        fn(y: &mut [f32], u: &[f32], bt: &[f32], stride: usize),
        lanes::up::<true, 64>(y, u, bt, stride)
    );

    pub(super) const AVX2: LowRankKernels = LowRankKernels {
        isa: Isa::Avx2,
        down: down_avx2,
        up: up_avx2,
    };

    pub(super) const AVX512: LowRankKernels = LowRankKernels {
        isa: Isa::Avx512Vnni,
        down: down_avx512,
        up: up_avx512,
    };
}
