//! [`LoraPair`]: one projection's low-rank delta, `y += scale · (x · Aᵀ) · Bᵀ`, with A and B
//! as `f32` [`Linear`] layers so the products run on the same GEMM (and threads) as the base.

use kestrel_kernels::cpu::gemm::Scratch;
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::{DType, SharedBytes};

use super::error::LoraError;
use crate::layers::Linear;
use crate::weights::TensorView;

/// Reused buffers of the low-rank products.
#[derive(Debug, Default)]
pub struct LoraScratch {
    /// The rows of the input that run with one adapter.
    pub(crate) x: Vec<f32>,
    /// `x · Aᵀ`, `[m, rank]`.
    pub(crate) u: Vec<f32>,
    /// `u · Bᵀ`, `[m, out]`.
    pub(crate) delta: Vec<f32>,
}

#[derive(Debug, Clone)]
pub struct LoraPair {
    /// `[rank, in]`.
    a: Linear,
    /// `[out, rank]`.
    b: Linear,
    scale: f32,
}

fn f32_linear(name: &str, values: &[f32], rows: usize, cols: usize) -> Result<Linear, LoraError> {
    let view = TensorView {
        name: name.to_string(),
        dtype: DType::F32,
        shape: vec![rows, cols],
        data: SharedBytes::from_f32(values),
    };
    Linear::new(view, None).map_err(|e| LoraError::BadTensor {
        tensor: name.to_string(),
        reason: e.to_string(),
    })
}

impl LoraPair {
    /// From row-major `a` (`[rank, cols]`) and `b` (`[rows, rank]`).
    pub fn new(
        name: &str,
        (a, b): (&[f32], &[f32]),
        (rank, rows, cols): (usize, usize, usize),
        scale: f32,
    ) -> Result<LoraPair, LoraError> {
        Ok(LoraPair {
            a: f32_linear(&format!("{name}.lora_a"), a, rank, cols)?,
            b: f32_linear(&format!("{name}.lora_b"), b, rows, rank)?,
            scale,
        })
    }

    pub fn rank(&self) -> usize {
        self.a.rows()
    }

    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// `(rows, cols)` of the delta.
    pub fn shape(&self) -> (usize, usize) {
        (self.b.rows(), self.a.cols())
    }

    /// `delta[m × out] = scale · (x[m × in] · Aᵀ) · Bᵀ` (into `s.delta`).
    pub fn product(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        m: usize,
        s: &mut LoraScratch,
        scratch: &mut Scratch,
    ) {
        let (r, out) = (self.rank(), self.b.rows());
        s.u.resize(m * r, 0.0);
        s.delta.resize(m * out, 0.0);
        self.a.forward(pool, x, m, &mut s.u, scratch);
        self.b.forward(pool, &s.u, m, &mut s.delta, scratch);
        s.delta.iter_mut().for_each(|d| *d *= self.scale);
    }

    /// The merged delta `scale · B · A`, `[out, in]` row-major (for writing merged weights).
    pub fn dense_delta(&self) -> Vec<f32> {
        let (r, (rows, cols)) = (self.rank(), self.shape());
        let (mut a, mut b) = (vec![0.0; r * cols], vec![0.0; rows * r]);
        (0..r).for_each(|k| self.a.dequantize_row(k, &mut a[k * cols..(k + 1) * cols]));
        (0..rows).for_each(|i| self.b.dequantize_row(i, &mut b[i * r..(i + 1) * r]));
        let mut out = vec![0.0f32; rows * cols];
        for (i, row) in out.chunks_exact_mut(cols).enumerate() {
            for k in 0..r {
                let bk = self.scale * b[i * r + k];
                row.iter_mut()
                    .zip(&a[k * cols..(k + 1) * cols])
                    .for_each(|(o, &av)| *o += bk * av);
            }
        }
        out
    }
}
