//! [`LoraPair`]: one projection's low-rank delta, `y += scale · (x · Aᵀ) · Bᵀ`, with A kept
//! `[rank, in]` and B kept transposed, `[rank, out]`, as the low-rank kernels
//! (`kestrel_kernels::cpu::low_rank`) read them.

use kestrel_kernels::cpu::low_rank::LowRankGroup;

use super::error::LoraError;

/// Reused buffers of the low-rank products.
#[derive(Debug, Default)]
pub struct LoraScratch {
    /// `x · Aᵀ` of every row of a step's adapters, `rank` values a row.
    pub(crate) u: Vec<f32>,
}

#[derive(Debug, Clone)]
pub struct LoraPair {
    /// `[rank, in]`.
    a: Vec<f32>,
    /// `Bᵀ`, `[rank, out]`.
    bt: Vec<f32>,
    rank: usize,
    scale: f32,
}

impl LoraPair {
    /// From row-major `a` (`[rank, cols]`) and `b` (`[rows, rank]`).
    pub fn new(
        name: &str,
        (a, b): (&[f32], &[f32]),
        (rank, rows, cols): (usize, usize, usize),
        scale: f32,
    ) -> Result<LoraPair, LoraError> {
        let bad = |what: &str, len: usize, want: usize| LoraError::BadTensor {
            tensor: format!("{name}.{what}"),
            reason: format!("{len} values, expected {want}"),
        };
        if a.len() != rank * cols {
            return Err(bad("lora_a", a.len(), rank * cols));
        }
        if b.len() != rows * rank {
            return Err(bad("lora_b", b.len(), rows * rank));
        }
        let mut bt = vec![0.0; rank * rows];
        for (i, row) in b.chunks_exact(rank.max(1)).enumerate().take(rows) {
            for (k, &v) in row.iter().enumerate() {
                bt[k * rows + i] = v;
            }
        }
        Ok(LoraPair {
            a: a.to_vec(),
            bt,
            rank,
            scale,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// `(rows, cols)` of the delta.
    pub fn shape(&self) -> (usize, usize) {
        match self.rank {
            0 => (0, 0),
            r => (self.bt.len() / r, self.a.len() / r),
        }
    }

    /// The pair as a low-rank group over `rows`.
    pub fn group<'a>(&'a self, rows: &'a [usize]) -> LowRankGroup<'a> {
        LowRankGroup {
            rows,
            a: &self.a,
            bt: &self.bt,
            rank: self.rank,
            scale: self.scale,
        }
    }

    /// The merged delta `scale · B · A`, `[out, in]` row-major (for writing merged weights).
    pub fn dense_delta(&self) -> Vec<f32> {
        let (rows, cols) = self.shape();
        let mut out = vec![0.0f32; rows * cols];
        for (i, row) in out.chunks_exact_mut(cols.max(1)).enumerate().take(rows) {
            for k in 0..self.rank {
                let bk = self.scale * self.bt[k * rows + i];
                row.iter_mut()
                    .zip(&self.a[k * cols..(k + 1) * cols])
                    .for_each(|(o, &av)| *o += bk * av);
            }
        }
        out
    }
}
