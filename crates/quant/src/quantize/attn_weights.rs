//! [`key_weights`]: how much each token's value vector matters to the attention outputs of a
//! calibration sequence, so GPTQ can weight the V projection's Hessian by it.
//!
//! An error `Δv_j` in token `j`'s value reaches query `i`'s output as `a_ij Δv_j`. Summed over
//! queries (errors of different tokens taken as uncorrelated) the squared output error is
//! `Σ_j (Σ_i a_ij²) |Δv_j|²`, so the V projection's layer-output objective weights token `j`'s
//! input by `w_j = Σ_i a_ij²` (averaged over heads), where the plain Hessian weights every
//! token by 1. The difference is large where a few tokens draw most of the attention (the
//! first token of a sequence, an "attention sink"): there the plain Hessian lets GPTQ trade
//! the sink's value accuracy for the others', and every later token pays for it.

use kestrel_kernels::cpu::gemm::{matmul, MatRef, Scratch};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;
use kestrel_model::arch::AttnHeads;

/// Reused buffers.
#[derive(Default)]
pub struct KeyWeightScratch {
    q: Vec<f32>,
    k: Vec<f32>,
    scores: Vec<f32>,
    gemm: Scratch,
}

/// `w_j = mean over heads of Σ_{i ≥ j} a_ij²` for one causal sequence of `m` tokens starting
/// at position 0; `q` is `[m, n_heads * head_dim]`, `k` is `[m, n_kv_heads * head_dim]`.
pub fn key_weights(
    pool: &ThreadPool,
    q: &[f32],
    k: &[f32],
    m: usize,
    h: AttnHeads,
    s: &mut KeyWeightScratch,
) -> Vec<f32> {
    let (hd, group) = (h.head_dim, h.n_heads / h.n_kv_heads.max(1));
    let mut w = vec![0f32; m];
    for head in 0..h.n_heads {
        head_rows(q, m, h.n_heads * hd, head * hd, hd, &mut s.q);
        head_rows(k, m, h.n_kv_heads * hd, (head / group) * hd, hd, &mut s.k);
        s.scores.resize(m * m, 0.0);
        let keys = MatRef {
            dtype: DType::F32,
            rows: m,
            cols: hd,
            data: bytemuck::cast_slice(&s.k),
        };
        matmul(pool, keys, &s.q, m, &mut s.scores, &mut s.gemm);
        for (i, row) in s.scores.chunks_exact_mut(m).enumerate() {
            let row = &mut row[..=i];
            let max = row
                .iter()
                .fold(f32::NEG_INFINITY, |a, &v| a.max(v * h.scale));
            let mut sum = 0f32;
            row.iter_mut().for_each(|v| {
                *v = (*v * h.scale - max).exp();
                sum += *v;
            });
            w[..=i]
                .iter_mut()
                .zip(row.iter())
                .for_each(|(wj, p)| *wj += (p / sum).powi(2));
        }
    }
    w.iter_mut().for_each(|v| *v /= h.n_heads as f32);
    w
}

/// Columns `start..start + width` of the `m` rows (`stride` wide) of `x`, contiguous.
fn head_rows(x: &[f32], m: usize, stride: usize, start: usize, width: usize, out: &mut Vec<f32>) {
    out.clear();
    for r in 0..m {
        out.extend_from_slice(&x[r * stride + start..r * stride + start + width]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct evaluation of the definition.
    fn reference(q: &[f32], k: &[f32], m: usize, h: AttnHeads) -> Vec<f32> {
        let (hd, group) = (h.head_dim, h.n_heads / h.n_kv_heads);
        let mut w = vec![0f64; m];
        for head in 0..h.n_heads {
            let kh = head / group;
            for i in 0..m {
                let s: Vec<f64> = (0..=i)
                    .map(|j| {
                        let dot: f64 = (0..hd)
                            .map(|d| {
                                q[i * h.n_heads * hd + head * hd + d] as f64
                                    * k[j * h.n_kv_heads * hd + kh * hd + d] as f64
                            })
                            .sum();
                        dot * h.scale as f64
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|v| (v - max).exp()).sum();
                s.iter()
                    .enumerate()
                    .for_each(|(j, v)| w[j] += ((v - max).exp() / z).powi(2));
            }
        }
        w.iter().map(|v| (v / h.n_heads as f64) as f32).collect()
    }

    #[test]
    fn matches_the_definition_under_gqa() {
        let h = AttnHeads {
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 8,
            scale: 1.0 / 8f32.sqrt(),
        };
        let m = 13;
        let mut seed = 5u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f32 / (1u64 << 31) as f32) * 4.0 - 2.0
        };
        let q: Vec<f32> = (0..m * 32).map(|_| rnd()).collect();
        let k: Vec<f32> = (0..m * 16).map(|_| rnd()).collect();
        let got = key_weights(
            &ThreadPool::new(2),
            &q,
            &k,
            m,
            h,
            &mut KeyWeightScratch::default(),
        );
        let want = reference(&q, &k, m, h);
        for (j, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() < 1e-4 * (1.0 + b), "key {j}: {a} vs {b}");
        }
        // The first key is seen by every query: with uniform attention it gets Σ 1/(i+1)².
        let flat = key_weights(
            &ThreadPool::new(1),
            &vec![0.0; m * 32],
            &k,
            m,
            h,
            &mut KeyWeightScratch::default(),
        );
        let harmonic: f32 = (1..=m).map(|i| 1.0 / (i * i) as f32).sum();
        assert!(
            (flat[0] - harmonic).abs() < 1e-5,
            "{} vs {harmonic}",
            flat[0]
        );
        assert!((flat[m - 1] - 1.0 / (m * m) as f32).abs() < 1e-6);
    }
}
