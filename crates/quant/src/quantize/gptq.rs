//! [`gptq`]: GPTQ (Frantar et al., 2022) — quantize a weight matrix column by column and
//! push each column's rounding error onto the columns not yet quantized, weighted by the
//! inverse Hessian `H = 2 Σ x xᵀ` of the layer's calibration inputs, so the layer's *output*
//! error stays small.
//!
//! Options as in the reference implementation: `damp` (fraction of the mean diagonal added
//! to `H`), `act_order` (quantize columns in order of decreasing `H_ii`; groups then follow
//! that order and the result carries the permutation), lazy batch updates of 128 columns,
//! dead inputs (`H_ii = 0`) zeroed.

use kestrel_kernels::cpu::gemm::{matmul, MatRef, Scratch};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;

use super::linalg::{inverse_upper_cholesky, LinalgError};
use crate::codec::rtn::{Grid, GridKind};
use crate::codec::GroupQuant;

/// GPTQ settings.
#[derive(Debug, Clone, Copy)]
pub struct GptqConfig {
    /// Columns per quantization group (the whole row for per-channel).
    pub group: usize,
    pub kind: GridKind,
    pub act_order: bool,
    /// Dampening, as a fraction of the mean of `diag(H)`.
    pub damp: f32,
}

const BLOCK: usize = 128;

/// What GPTQ derives from a Hessian, shared by every matrix that reads the same input.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub cols: usize,
    /// Columns in quantization order (act-order), if not the identity.
    pub perm: Option<Vec<usize>>,
    /// Upper Cholesky factor of the dampened (permuted) `H⁻¹`.
    pub hinv: Vec<f32>,
    /// Inputs that were never non-zero (their weights are zeroed).
    pub dead: Vec<usize>,
}

/// Dampen, order and invert `h` (`[cols, cols]`, any positive multiple of `Σ x xᵀ`).
pub fn prepare(
    h: &[f32],
    cols: usize,
    act_order: bool,
    damp: f32,
) -> Result<Prepared, LinalgError> {
    let mut h = h.to_vec();
    let dead: Vec<usize> = (0..cols).filter(|&c| h[c * cols + c] == 0.0).collect();
    dead.iter().for_each(|&c| h[c * cols + c] = 1.0);
    let perm = act_order.then(|| order_by_diagonal(&h, cols));
    if let Some(p) = &perm {
        h = permute_symmetric(&h, cols, p);
    }
    let mean_diag = (0..cols).map(|i| h[i * cols + i] as f64).sum::<f64>() / cols as f64;
    for i in 0..cols {
        h[i * cols + i] += damp * mean_diag as f32;
    }
    Ok(Prepared {
        cols,
        perm,
        hinv: inverse_upper_cholesky(&h, cols)?,
        dead,
    })
}

/// Quantize the row-major `[rows, cols]` matrix `w` with Hessian `h` (`[cols, cols]`, any
/// positive multiple of `Σ x xᵀ`).
pub fn gptq(
    pool: &ThreadPool,
    w: &[f32],
    rows: usize,
    cols: usize,
    h: &[f32],
    cfg: GptqConfig,
) -> Result<GroupQuant, LinalgError> {
    let prep = prepare(h, cols, cfg.act_order, cfg.damp)?;
    Ok(gptq_prepared(pool, w, rows, &prep, cfg))
}

/// [`gptq`] with the Hessian already [`prepare`]d.
pub fn gptq_prepared(
    pool: &ThreadPool,
    w: &[f32],
    rows: usize,
    prep: &Prepared,
    cfg: GptqConfig,
) -> GroupQuant {
    let cols = prep.cols;
    let mut w = w.to_vec();
    for &c in &prep.dead {
        (0..rows).for_each(|r| w[r * cols + c] = 0.0);
    }
    if let Some(p) = &prep.perm {
        w = permute_columns(&w, rows, cols, p);
    }
    let mut q = quantize_columns(pool, &mut w, rows, cols, &prep.hinv, cfg);
    q.perm = prep
        .perm
        .as_ref()
        .map(|p| p.iter().map(|&c| c as u32).collect());
    q
}

/// Column indices sorted by decreasing `H_ii` (stable).
fn order_by_diagonal(h: &[f32], n: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by(|&a, &b| h[b * n + b].total_cmp(&h[a * n + a]));
    idx
}

fn permute_columns(w: &[f32], rows: usize, cols: usize, perm: &[usize]) -> Vec<f32> {
    let mut out = vec![0f32; rows * cols];
    for r in 0..rows {
        for (j, &c) in perm.iter().enumerate() {
            out[r * cols + j] = w[r * cols + c];
        }
    }
    out
}

fn permute_symmetric(h: &[f32], n: usize, perm: &[usize]) -> Vec<f32> {
    let mut out = vec![0f32; n * n];
    for (i, &pi) in perm.iter().enumerate() {
        for (j, &pj) in perm.iter().enumerate() {
            out[i * n + j] = h[pi * n + pj];
        }
    }
    out
}

/// The GPTQ loop over blocks of [`BLOCK`] columns; `hinv` is the upper Cholesky factor of
/// `H⁻¹`. `w` is consumed as the running (error-corrected) weights.
fn quantize_columns(
    pool: &ThreadPool,
    w: &mut [f32],
    rows: usize,
    cols: usize,
    hinv: &[f32],
    cfg: GptqConfig,
) -> GroupQuant {
    let group = cfg.group.min(cols);
    let groups = cols / group;
    let mut out = GroupQuant {
        rows,
        cols,
        bits: cfg.kind.bits(),
        group_size: group,
        codes: vec![0; rows * cols],
        scales: vec![0.0; rows * groups],
        zeros: vec![0; rows * groups],
        perm: None,
    };
    let mut grids = vec![
        Grid {
            scale: 1.0,
            zero: 0,
            max_code: 15
        };
        rows
    ];
    let mut scratch = Scratch::default();
    let mut i1 = 0;
    while i1 < cols {
        let i2 = (i1 + BLOCK).min(cols);
        let span = BlockSpan {
            rows,
            cols,
            group,
            i1,
            i2,
        };
        let count = span.count();
        let mut block: Vec<f32> = (0..rows)
            .flat_map(|r| w[r * cols + i1..r * cols + i2].to_vec())
            .collect();
        let mut err = vec![0f32; rows * count];
        for i in 0..count {
            let col = i1 + i;
            if col % group == 0 {
                fit_group(&block, &w[..], span, i, cfg.kind, &mut grids, &mut out);
            }
            let d = hinv[col * cols + col];
            let hrow = &hinv[col * cols + col..col * cols + i2];
            for r in 0..rows {
                let g = &grids[r];
                let x = block[r * count + i];
                let code = g.code(x);
                out.codes[r * cols + col] = code;
                let e = (x - g.value(code)) / d;
                err[r * count + i] = e;
                let tail = &mut block[r * count + i..r * count + count];
                tail.iter_mut().zip(hrow).for_each(|(v, hv)| *v -= e * hv);
            }
        }
        propagate(pool, w, span, &err, hinv, &mut scratch);
        i1 = i2;
    }
    out
}

/// Where the block of columns being quantized lies: columns `i1..i2` of a `[rows, cols]`
/// matrix quantized in groups of `group` columns.
#[derive(Debug, Clone, Copy)]
struct BlockSpan {
    rows: usize,
    cols: usize,
    group: usize,
    i1: usize,
    i2: usize,
}

impl BlockSpan {
    /// Columns in the block.
    fn count(&self) -> usize {
        self.i2 - self.i1
    }
}

/// Fix the grids of the group starting at block column `i` from the current weights: the
/// in-block (already error-corrected) columns from `block`, later columns from `w`.
fn fit_group(
    block: &[f32],
    w: &[f32],
    span: BlockSpan,
    i: usize,
    kind: GridKind,
    grids: &mut [Grid],
    out: &mut GroupQuant,
) {
    let BlockSpan {
        rows,
        cols,
        group,
        i1,
        ..
    } = span;
    let count = span.count();
    let col = i1 + i;
    let gi = col / group;
    let groups = cols / group;
    let mut vals = Vec::with_capacity(group);
    for r in 0..rows {
        vals.clear();
        for c in col..col + group {
            vals.push(if c < i1 + count {
                block[r * count + (c - i1)]
            } else {
                w[r * cols + c]
            });
        }
        let g = kind.fit(&vals);
        out.scales[r * groups + gi] = g.scale;
        out.zeros[r * groups + gi] = g.zero;
        grids[r] = g;
    }
}

/// `w[:, i2:] -= err · hinv[i1:i2, i2:]` (the lazy batch update), on the matrix kernels.
fn propagate(
    pool: &ThreadPool,
    w: &mut [f32],
    span: BlockSpan,
    err: &[f32],
    hinv: &[f32],
    scratch: &mut Scratch,
) {
    let BlockSpan {
        rows, cols, i1, i2, ..
    } = span;
    let rest = cols - i2;
    if rest == 0 {
        return;
    }
    let count = span.count();
    // The product's "weight" matrix is hinv[i1:i2, i2:]ᵀ: rest rows of count.
    let mut ht = vec![0f32; rest * count];
    for k in 0..count {
        for j in 0..rest {
            ht[j * count + k] = hinv[(i1 + k) * cols + i2 + j];
        }
    }
    let mut delta = vec![0f32; rows * rest];
    let m = MatRef {
        dtype: DType::F32,
        rows: rest,
        cols: count,
        data: bytemuck::cast_slice(&ht),
    };
    matmul(pool, m, err, rows, &mut delta, scratch);
    for r in 0..rows {
        let dst = &mut w[r * cols + i2..(r + 1) * cols];
        dst.iter_mut()
            .zip(&delta[r * rest..(r + 1) * rest])
            .for_each(|(v, d)| *v -= d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::rtn::quantize_rtn;

    /// Correlated inputs (so the Hessian matters) and a random-ish weight matrix.
    fn problem(n: usize, cols: usize, rows: usize) -> (Vec<f32>, Vec<f32>) {
        let mut seed = 12345u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let base: Vec<f32> = (0..n * 4).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..n)
            .flat_map(|t| {
                let b = base[t * 4..t * 4 + 4].to_vec();
                let noise: Vec<f32> = (0..cols).map(|_| 0.1 * rnd()).collect();
                (0..cols)
                    .map(move |c| b[c % 4] * (1.0 + (c % 7) as f32) + noise[c])
                    .collect::<Vec<_>>()
            })
            .collect();
        let w: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
        (x, w)
    }

    fn output_error(x: &[f32], w: &[f32], wq: &[f32], cols: usize, rows: usize) -> f64 {
        x.chunks_exact(cols)
            .map(|xr| {
                (0..rows)
                    .map(|r| {
                        let a: f32 = xr
                            .iter()
                            .zip(&w[r * cols..(r + 1) * cols])
                            .map(|(p, q)| p * q)
                            .sum();
                        let b: f32 = xr
                            .iter()
                            .zip(&wq[r * cols..(r + 1) * cols])
                            .map(|(p, q)| p * q)
                            .sum();
                        ((a - b) as f64).powi(2)
                    })
                    .sum::<f64>()
            })
            .sum()
    }

    fn hessian(x: &[f32], cols: usize) -> Vec<f32> {
        let mut h = vec![0f32; cols * cols];
        for xr in x.chunks_exact(cols) {
            for i in 0..cols {
                for j in 0..cols {
                    h[i * cols + j] += xr[i] * xr[j];
                }
            }
        }
        h
    }

    #[test]
    fn gptq_beats_rtn_on_output_error() {
        let (n, cols, rows) = (256, 64, 16);
        let (x, w) = problem(n, cols, rows);
        let h = hessian(&x, cols);
        let pool = ThreadPool::new(1);
        let rtn = quantize_rtn(&w, rows, cols, 32, GridKind::Asymmetric(4)).dequantize();
        for act_order in [false, true] {
            let cfg = GptqConfig {
                group: 32,
                kind: GridKind::Asymmetric(4),
                act_order,
                damp: 0.01,
            };
            let q = gptq(&pool, &w, rows, cols, &h, cfg).unwrap();
            assert_eq!(q.perm.is_some(), act_order);
            if let Some(p) = &q.perm {
                let mut sorted = p.clone();
                sorted.sort();
                assert_eq!(
                    sorted,
                    (0..cols as u32).collect::<Vec<_>>(),
                    "a permutation"
                );
            }
            let e_gptq = output_error(&x, &w, &q.dequantize(), cols, rows);
            let e_rtn = output_error(&x, &w, &rtn, cols, rows);
            assert!(
                e_gptq < 0.7 * e_rtn,
                "act_order {act_order}: GPTQ {e_gptq} vs RTN {e_rtn}"
            );
        }
    }

    #[test]
    fn identity_hessian_reduces_to_rtn() {
        let (cols, rows) = (64, 4);
        let (_, w) = problem(1, cols, rows);
        let mut h = vec![0f32; cols * cols];
        (0..cols).for_each(|i| h[i * cols + i] = 1.0);
        let pool = ThreadPool::new(1);
        let cfg = GptqConfig {
            group: 64,
            kind: GridKind::Asymmetric(4),
            act_order: false,
            damp: 0.0,
        };
        let q = gptq(&pool, &w, rows, cols, &h, cfg).unwrap();
        let rtn = quantize_rtn(&w, rows, cols, 64, GridKind::Asymmetric(4));
        assert_eq!(q.codes, rtn.codes);
        assert_eq!(q.scales, rtn.scales);
    }

    #[test]
    fn dead_inputs_get_zero_weight() {
        let (cols, rows) = (32, 2);
        let (_, w) = problem(1, cols, rows);
        let mut h = vec![0f32; cols * cols];
        (1..cols).for_each(|i| h[i * cols + i] = 1.0);
        let pool = ThreadPool::new(1);
        let cfg = GptqConfig {
            group: 32,
            kind: GridKind::Symmetric8,
            act_order: false,
            damp: 0.01,
        };
        let q = gptq(&pool, &w, rows, cols, &h, cfg).unwrap();
        let d = q.dequantize();
        assert_eq!(d[0], 0.0);
        assert_eq!(d[cols], 0.0);
    }
}
