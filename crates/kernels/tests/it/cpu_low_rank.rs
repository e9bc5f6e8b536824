//! Low-rank (LoRA) updates: every SIMD variant of the row kernels against the scalar spec, and
//! the threaded multi-group update against a naive `y += scale · (x · Aᵀ) · Bᵀ`.

use kestrel_kernels::cpu::low_rank::{
    low_rank_update_with, reference, LowRankGroup, LowRankKernels,
};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn random(n: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

fn close(got: &[f32], want: &[f32], what: &str) {
    let scale = want.iter().fold(1.0f32, |a, v| a.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * scale, "{what} [{i}]: {g} vs {w}");
    }
}

fn variants() -> Vec<LowRankKernels> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni]
        .into_iter()
        .filter(|&isa| isa <= Isa::supported())
        .map(LowRankKernels::for_isa)
        .collect()
}

#[test]
fn row_kernels_match_the_scalar_spec() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (rank, n) in [(1, 7), (8, 64), (16, 100), (16, 577)] {
        let (x, a) = (random(n, &mut rng), random(rank * n, &mut rng));
        let mut want = vec![0.0; rank];
        reference::down(&x, &a, 0.5, &mut want);
        let (u, stride) = (random(rank, &mut rng), n + 3);
        let bt = random(rank * stride, &mut rng);
        let y0 = random(n, &mut rng);
        let mut want_y = y0.clone();
        reference::up(&mut want_y, &u, &bt, stride);
        for k in variants() {
            let mut got = vec![f32::NAN; rank];
            (k.down)(&x, &a, 0.5, &mut got);
            close(&got, &want, &format!("{:?} down r={rank} n={n}", k.isa));
            let mut y = y0.clone();
            (k.up)(&mut y, &u, &bt, stride);
            close(&y, &want_y, &format!("{:?} up r={rank} n={n}", k.isa));
        }
    }
}

struct Group {
    rows: Vec<usize>,
    a: Vec<f32>,
    bt: Vec<f32>,
    rank: usize,
    scale: f32,
}

#[test]
fn groups_update_their_own_rows_as_the_naive_product() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let (t, n_in, n_out) = (9, 96, 600);
    // Rows 2 and 7 have no adapter; the second group has nothing at this site.
    let layout: [(&[usize], usize); 3] = [(&[0, 3, 4], 16), (&[1, 8], 0), (&[5, 6], 4)];
    let groups: Vec<Group> = layout
        .iter()
        .map(|&(rows, rank)| Group {
            rows: rows.to_vec(),
            a: random(rank * n_in, &mut rng),
            bt: random(rank * n_out, &mut rng),
            rank,
            scale: 0.25 * rank as f32,
        })
        .collect();
    let x = random(t * n_in, &mut rng);
    let y0 = random(t * n_out, &mut rng);
    let mut want = y0.clone();
    for g in &groups {
        for &r in &g.rows {
            let xr = &x[r * n_in..(r + 1) * n_in];
            let u: Vec<f32> = (0..g.rank)
                .map(|k| {
                    g.a[k * n_in..(k + 1) * n_in]
                        .iter()
                        .zip(xr)
                        .map(|(a, b)| a * b)
                        .sum()
                })
                .collect();
            for c in 0..n_out {
                let d: f32 = (0..g.rank).map(|k| u[k] * g.bt[k * n_out + c]).sum();
                want[r * n_out + c] += g.scale * d;
            }
        }
    }
    let pick = |i: usize| {
        let g = &groups[i];
        (g.rank > 0).then_some(LowRankGroup {
            rows: &g.rows,
            a: &g.a,
            bt: &g.bt,
            rank: g.rank,
            scale: g.scale,
        })
    };
    for threads in [1, 2, 3] {
        let pool = ThreadPool::new(threads);
        for k in variants() {
            let (mut y, mut u) = (y0.clone(), Vec::new());
            low_rank_update_with(
                &pool,
                &k,
                &pick,
                groups.len(),
                (&x, n_in),
                (&mut y, n_out),
                &mut u,
            );
            close(&y, &want, &format!("{:?}, {threads} threads", k.isa));
            for r in [2, 7] {
                assert_eq!(
                    y[r * n_out..(r + 1) * n_out],
                    y0[r * n_out..(r + 1) * n_out]
                );
            }
        }
    }
}
