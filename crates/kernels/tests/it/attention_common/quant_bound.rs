//! The quantization bound. With per-element storage errors `|k'−k| ≤ ek`, `|v'−v| ≤ ev`,
//! every visible score moves by at most `ε = scale · max_j Σ_d |q_d|·ek_jd`, so each softmax
//! weight moves by a factor in `[e^−2ε, e^2ε]` and, per output element,
//! `|o'−o| ≤ (e^2ε − 1)·max_j |v_jd| + max_j ev_jd`. Per element: f16 `ek = |x|·2^−11`
//! (plus half the smallest subnormal), q8 `ek = scale/2` with `scale = max|row| / 127`.
//!
//! [`run_case`] checks every ISA variant against the reference, then a quantized dtype's
//! reference against the f32 reference of the same tokens within this bound.

use kestrel_kernels::cpu::attention::{attention_with, reference, AttnParams, KvDtype};
use kestrel_kernels::cpu::{Isa, ThreadPool};
use rand_chacha::ChaCha8Rng;

use super::{build, params_of, seqs_of, Built, Case};

/// Bound on `|decoded − x|` for each element of one stored head row.
fn elem_err(dtype: KvDtype, row: &[f32]) -> Vec<f32> {
    match dtype {
        KvDtype::F32 => vec![0.0; row.len()],
        KvDtype::F16 => row
            .iter()
            .map(|x| x.abs() * 2f32.powi(-11) + 2f32.powi(-25))
            .collect(),
        KvDtype::Q8 => {
            let amax = row.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let half_step = amax / 127.0 / 2.0;
            row.iter()
                .map(|x| half_step * (1.0 + 1e-5) + x.abs() * 1e-6)
                .collect()
        }
    }
}

/// The bound above on `|o_dtype − o_f32|` for every output element of `c`.
fn quant_bound(c: &Case, dtype: KvDtype, b: &Built) -> Vec<f32> {
    let (hd, p) = (c.head_dim, params_of(c));
    let mut bound = Vec::new();
    for (s, &(start, n)) in c.seqs.iter().enumerate() {
        for i in 0..n {
            let pos = start + i;
            let first = c.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            for head in 0..p.n_heads {
                let kvh = head / c.group;
                let q = &b.qs[s][(i * p.n_heads + head) * hd..][..hd];
                let rows = &b.orig[s][first..=pos];
                let mut eps = 0.0f32;
                let (mut vmax, mut evmax) = (vec![0.0f32; hd], vec![0.0f32; hd]);
                for (kr, vr) in rows {
                    let (k, v) = (&kr[kvh * hd..][..hd], &vr[kvh * hd..][..hd]);
                    let ek = elem_err(dtype, k);
                    let dot: f32 = q.iter().zip(&ek).map(|(a, e)| a.abs() * e).sum();
                    eps = eps.max(dot * p.scale);
                    for (d, e) in elem_err(dtype, v).into_iter().enumerate() {
                        vmax[d] = vmax[d].max(v[d].abs());
                        evmax[d] = evmax[d].max(e);
                    }
                }
                let grow = (2.0 * eps as f64).exp_m1() as f32;
                bound.extend((0..hd).map(|d| grow * vmax[d] + evmax[d] + 1e-5));
            }
        }
    }
    bound
}

pub fn run_case(c: &Case, dtype: KvDtype, pool: &ThreadPool, rng: &mut ChaCha8Rng) {
    run_case_with(c, dtype, pool, rng, params_of(c));
}

/// [`run_case`] with `params` (ALiBi biases shift scores equally on every dtype, so the
/// quantization bound holds unchanged).
pub fn run_case_with(
    c: &Case,
    dtype: KvDtype,
    pool: &ThreadPool,
    rng: &mut ChaCha8Rng,
    params: AttnParams,
) {
    let b = build(c, dtype, 0, rng);
    let seqs = seqs_of(c, &b);
    let total: usize = b.qs.iter().map(Vec::len).sum();
    let mut want = vec![0.0; total];
    reference(&b.cache.view(), &seqs, params, &mut want);
    for isa in Isa::available() {
        let mut got = vec![f32::NAN; total];
        attention_with(isa, pool, &b.cache.view(), &seqs, params, &mut got);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 2e-5 + 1e-4 * w.abs(),
                "{dtype} {isa:?} bs={} n_kv={} group={} window={:?} alibi={:?} seqs={:?}: out[{i}] = {g}, reference {w}",
                c.block_size, c.n_kv, c.group, c.window, params.alibi, c.seqs
            );
        }
    }
    if dtype == KvDtype::F32 {
        return;
    }
    let mut exact = vec![0.0; total];
    reference(&b.exact.view(), &seqs, params, &mut exact);
    let bound = quant_bound(c, dtype, &b);
    for (i, ((&w, &e), &bd)) in want.iter().zip(&exact).zip(&bound).enumerate() {
        assert!(
            (w - e).abs() <= bd,
            "{dtype} bs={} group={} window={:?} seqs={:?}: out[{i}] = {w}, f32 KV {e}, bound {bd}",
            c.block_size,
            c.group,
            c.window,
            c.seqs
        );
    }
}
