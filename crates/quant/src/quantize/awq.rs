//! [`awq_layer_scales`]: activation-aware weight quantization (Lin et al., 2023).
//!
//! Input channels that carry large activations matter most. For each group of linear layers
//! that read the same input, search per-input-channel scales `s = mean|x|^α` (normalised, α on
//! a grid in `[0, 1)`) that minimise the error of the layers' outputs on sampled calibration
//! rows when the weights are multiplied by `s`, group-quantized, and divided back by `s`.
//! The chosen `s` multiplies the weight columns and its inverse is folded into the operation
//! that produces the input (an RMSNorm weight, or the rows of the up projection), so the
//! unquantized model is unchanged and the quantizer sees salient channels enlarged.
//!
//! `α = 0` gives `s = 1` (plain round-to-nearest), so on the sampled rows the search never
//! does worse than RTN.

use kestrel_kernels::cpu::gemm::{matmul, MatRef, Scratch};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;

use crate::codec::rtn::{fake_quantize, GridKind};

/// AWQ search settings.
#[derive(Debug, Clone, Copy)]
pub struct AwqConfig {
    /// Columns per quantization group.
    pub group: usize,
    pub kind: GridKind,
    /// Grid points for α.
    pub n_grid: usize,
}

/// One weight matrix read by the scaled input: row-major `[rows, cols]`.
pub struct Weight<'a> {
    pub values: &'a [f32],
    pub rows: usize,
}

/// The best scales for the weights `ws` (all with `cols` inputs) given sampled input rows `x`
/// (`[n, cols]`) and the per-channel mean magnitudes `mean_abs`. Returns `(scales, best α,
/// loss at best α / loss at α = 0)`.
pub fn search_scales(
    pool: &ThreadPool,
    x: &[f32],
    mean_abs: &[f32],
    ws: &[Weight<'_>],
    cfg: AwqConfig,
) -> (Vec<f32>, f32, f64) {
    let cols = mean_abs.len();
    let n = x.len() / cols;
    let mut scratch = Scratch::default();
    let reference: Vec<Vec<f32>> = ws
        .iter()
        .map(|w| product(pool, x, n, w.values, w.rows, cols, &mut scratch))
        .collect();
    let mut best = (f64::INFINITY, 0.0f32, vec![1.0f32; cols]);
    let mut base_loss = f64::INFINITY;
    for step in 0..cfg.n_grid.max(1) {
        let alpha = step as f32 / cfg.n_grid.max(1) as f32;
        let s = scales_for(mean_abs, alpha);
        let loss: f64 = ws
            .iter()
            .zip(&reference)
            .map(|(w, r)| {
                let q = scaled_fake_quant(w.values, cols, &s, cfg);
                let out = product(pool, x, n, &q, w.rows, cols, &mut scratch);
                out.iter()
                    .zip(r)
                    .map(|(a, b)| ((a - b) as f64).powi(2))
                    .sum::<f64>()
            })
            .sum();
        if step == 0 {
            base_loss = loss;
        }
        if loss < best.0 {
            best = (loss, alpha, s);
        }
    }
    let ratio = if base_loss > 0.0 {
        best.0 / base_loss
    } else {
        1.0
    };
    (best.2, best.1, ratio)
}

/// `s_c = max(mean_abs_c, 1e-4)^α`, normalised so `max(s) · min(s) = 1`.
pub fn scales_for(mean_abs: &[f32], alpha: f32) -> Vec<f32> {
    let s: Vec<f32> = mean_abs.iter().map(|m| m.max(1e-4).powf(alpha)).collect();
    let (lo, hi) = s
        .iter()
        .fold((f32::MAX, 0f32), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    let norm = (lo * hi).sqrt();
    s.iter().map(|v| v / norm).collect()
}

/// `Q(W diag(s)) diag(s)⁻¹`.
fn scaled_fake_quant(w: &[f32], cols: usize, s: &[f32], cfg: AwqConfig) -> Vec<f32> {
    let scaled: Vec<f32> = w.iter().enumerate().map(|(i, v)| v * s[i % cols]).collect();
    let mut q = vec![0f32; w.len()];
    fake_quantize(&scaled, cols, cfg.group, cfg.kind, &mut q);
    q.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v /= s[i % cols]);
    q
}

/// `x · wᵀ` (`[n, rows]`) on the f32 matrix kernels.
fn product(
    pool: &ThreadPool,
    x: &[f32],
    n: usize,
    w: &[f32],
    rows: usize,
    cols: usize,
    scratch: &mut Scratch,
) -> Vec<f32> {
    let mut out = vec![0f32; n * rows];
    let m = MatRef {
        dtype: DType::F32,
        rows,
        cols,
        data: bytemuck::cast_slice(w),
    };
    matmul(pool, m, x, n, &mut out, scratch);
    out
}

/// SmoothQuant's scales (Xiao et al., 2023): `s_c = max|x_c|^α / max_r |w_rc|^(1-α)` over
/// every matrix reading the input, moving activation outliers into the weights so per-token
/// activation quantization loses less. Channels never active keep `s = 1`.
pub fn smooth_scales(abs_max: &[f32], ws: &[Weight<'_>], alpha: f32) -> Vec<f32> {
    let cols = abs_max.len();
    let mut w_max = vec![0f32; cols];
    for w in ws {
        for row in w.values.chunks_exact(cols) {
            w_max
                .iter_mut()
                .zip(row)
                .for_each(|(m, v)| *m = m.max(v.abs()));
        }
    }
    abs_max
        .iter()
        .zip(&w_max)
        .map(|(&x, &w)| {
            if x <= 0.0 || w <= 0.0 {
                return 1.0;
            }
            (x.powf(alpha) / w.powf(1.0 - alpha)).clamp(1e-5, 1e5)
        })
        .collect()
}

/// SmoothQuant with the migration strength searched per site: among `alphas` (and no
/// smoothing at all), the scales whose W8A8 product — weights rounded to per-row int8,
/// activations to per-token int8 — is closest to the exact product on the sampled rows `x`.
pub fn search_smoothing(
    pool: &ThreadPool,
    x: &[f32],
    abs_max: &[f32],
    ws: &[Weight<'_>],
    alphas: &[f32],
) -> Vec<f32> {
    let cols = abs_max.len();
    let n = x.len() / cols;
    let mut scratch = Scratch::default();
    let reference: Vec<Vec<f32>> = ws
        .iter()
        .map(|w| product(pool, x, n, w.values, w.rows, cols, &mut scratch))
        .collect();
    let candidates = std::iter::once(vec![1.0; cols])
        .chain(alphas.iter().map(|&a| smooth_scales(abs_max, ws, a)));
    let mut best = (f64::INFINITY, vec![1.0; cols]);
    for s in candidates {
        let xs: Vec<f32> = x.iter().enumerate().map(|(i, v)| v / s[i % cols]).collect();
        let xq = round_rows_int8(&xs, cols);
        let loss: f64 = ws
            .iter()
            .zip(&reference)
            .map(|(w, r)| {
                let mut scaled = w.values.to_vec();
                scale_columns(&mut scaled, &s);
                let wq = round_rows_int8(&scaled, cols);
                let out = product(pool, &xq, n, &wq, w.rows, cols, &mut scratch);
                out.iter()
                    .zip(r)
                    .map(|(a, b)| ((a - b) as f64).powi(2))
                    .sum::<f64>()
            })
            .sum();
        if loss < best.0 {
            best = (loss, s);
        }
    }
    best.1
}

/// Every row rounded to symmetric int8 with its own scale (`amax / 127`).
fn round_rows_int8(m: &[f32], cols: usize) -> Vec<f32> {
    let mut out = m.to_vec();
    for row in out.chunks_exact_mut(cols) {
        let d = row.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
        if d > 0.0 {
            row.iter_mut().for_each(|v| *v = (*v / d).round() * d);
        }
    }
    out
}

/// Multiply the columns of a row-major `[rows, cols]` matrix by `s`.
pub fn scale_columns(w: &mut [f32], s: &[f32]) {
    let cols = s.len();
    w.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v *= s[i % cols]);
}

/// Divide row `r` of a row-major matrix (or element `r` of a vector) by `s[r]`.
pub fn unscale_rows(w: &mut [f32], s: &[f32]) {
    let cols = w.len() / s.len();
    for (row, sv) in w.chunks_exact_mut(cols).zip(s) {
        row.iter_mut().for_each(|v| *v /= sv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    }

    #[test]
    fn scales_are_normalised_and_alpha_zero_is_identity() {
        let m = [0.5, 2.0, 8.0];
        assert!(scales_for(&m, 0.0).iter().all(|v| (*v - 1.0).abs() < 1e-6));
        let s = scales_for(&m, 0.5);
        let (lo, hi) = (s[0], s[2]);
        assert!((lo * hi - 1.0).abs() < 1e-5);
        assert!(s[0] < s[1] && s[1] < s[2]);
    }

    #[test]
    fn search_protects_salient_channels() {
        // Two channels carry activations 50x larger than the rest.
        let (n, cols, rows) = (64, 64, 8);
        let mut seed = 7;
        let x: Vec<f32> = (0..n * cols)
            .map(|i| lcg(&mut seed) * if i % cols < 2 { 50.0 } else { 1.0 })
            .collect();
        let w: Vec<f32> = (0..rows * cols).map(|_| lcg(&mut seed)).collect();
        let mean_abs: Vec<f32> = (0..cols)
            .map(|c| (0..n).map(|t| x[t * cols + c].abs()).sum::<f32>() / n as f32)
            .collect();
        let pool = ThreadPool::new(1);
        let cfg = AwqConfig {
            group: 32,
            kind: GridKind::Asymmetric(4),
            n_grid: 20,
        };
        let (s, alpha, ratio) =
            search_scales(&pool, &x, &mean_abs, &[Weight { values: &w, rows }], cfg);
        assert!(alpha > 0.0, "some scaling helps");
        assert!(ratio < 0.9, "output error falls: {ratio}");
        assert!(s[0] > s[10] && s[1] > s[10]);
    }

    #[test]
    fn smoothing_balances_activation_and_weight_ranges() {
        let w = vec![1.0, 0.5, 2.0, 0.25];
        let s = smooth_scales(
            &[16.0, 1.0],
            &[Weight {
                values: &w,
                rows: 2,
            }],
            0.5,
        );
        // Channel 0: sqrt(16) / sqrt(2) ; channel 1: sqrt(1) / sqrt(0.5).
        assert!((s[0] - 4.0 / 2f32.sqrt()).abs() < 1e-5 && (s[1] - 2f32.sqrt()).abs() < 1e-5);
        // After smoothing the activation max and weight max of each channel are equal.
        assert!((16.0 / s[0] - 2.0 * s[0]).abs() < 1e-4);
        assert_eq!(
            smooth_scales(
                &[0.0],
                &[Weight {
                    values: &[1.0],
                    rows: 1
                }],
                0.5
            ),
            vec![1.0]
        );
    }

    #[test]
    fn smoothing_search_moves_outliers_into_weights() {
        let (n, cols, rows) = (32, 64, 8);
        let mut seed = 11;
        let x: Vec<f32> = (0..n * cols)
            .map(|i| lcg(&mut seed) * if i % cols == 3 { 80.0 } else { 1.0 })
            .collect();
        let w: Vec<f32> = (0..rows * cols).map(|_| lcg(&mut seed)).collect();
        let abs_max: Vec<f32> = (0..cols)
            .map(|c| (0..n).fold(0f32, |m, t| m.max(x[t * cols + c].abs())))
            .collect();
        let pool = ThreadPool::new(1);
        let s = search_smoothing(
            &pool,
            &x,
            &abs_max,
            &[Weight { values: &w, rows }],
            &[0.5, 0.8],
        );
        assert!(
            s[3] > 2.0 * s[0],
            "the outlier channel is divided down: {} vs {}",
            s[3],
            s[0]
        );
    }

    #[test]
    fn folding_keeps_the_product() {
        let s = [2.0, 0.5];
        let mut w = vec![1.0, 1.0, 3.0, 4.0];
        scale_columns(&mut w, &s);
        assert_eq!(w, vec![2.0, 0.5, 6.0, 2.0]);
        let mut norm = vec![4.0, 4.0];
        unscale_rows(&mut norm, &s);
        assert_eq!(norm, vec![2.0, 8.0]);
    }
}
