//! [`OutlierColumns`]: the few input channels of a linear layer whose activations are far
//! larger than the rest, computed in higher precision beside the layer's main (INT8) weights —
//! the mixed-precision decomposition of LLM.int8() (Dettmers et al., 2022), with the channel
//! set fixed at quantization time from calibration statistics.
//!
//! `y = x · Wᵀ` becomes `y = x' · W'ᵀ + x_o · W_oᵀ`, where `x'` is `x` with the outlier
//! channels zeroed (so a per-token activation scale is set by the ordinary channels), `W'` has
//! those columns zeroed, and `x_o`, `W_o` hold only the outlier channels.

use std::sync::Arc;

use kestrel_kernels::cpu::gemm::Scratch;
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::weight_matrix::WeightMatrix;
use crate::error::ModelError;

/// Outlier input channels and their weights.
#[derive(Debug, Clone)]
pub struct OutlierColumns {
    /// Input channels (stored column order), strictly increasing.
    cols: Arc<[u32]>,
    /// `[rows, cols.len()]`: the layer's weights on those channels.
    weight: WeightMatrix,
}

impl OutlierColumns {
    /// Check `cols` (distinct, increasing, below `in_cols`) against `weight`'s shape
    /// (`[out_rows, cols.len()]`).
    pub fn new(
        name: &str,
        cols: Vec<u32>,
        weight: WeightMatrix,
        out_rows: usize,
        in_cols: usize,
    ) -> Result<Self, ModelError> {
        let bad = |reason: String| {
            Err(ModelError::BadTensor {
                name: name.into(),
                reason,
            })
        };
        if cols.is_empty()
            || !cols.windows(2).all(|p| p[0] < p[1])
            || cols.iter().any(|&c| c as usize >= in_cols)
        {
            return bad(format!(
                "outlier columns must be distinct, increasing and below {in_cols}"
            ));
        }
        if weight.rows() != out_rows || weight.cols() != cols.len() {
            return bad(format!(
                "outlier weights are {}x{}, expected {out_rows}x{}",
                weight.rows(),
                weight.cols(),
                cols.len()
            ));
        }
        Ok(OutlierColumns {
            cols: cols.into(),
            weight,
        })
    }

    /// Bytes of the outlier weights.
    pub fn n_bytes(&self) -> usize {
        self.weight.n_bytes()
    }

    /// Move the outlier channels of the `m` rows of `x` (`in_cols` wide) into `xo`
    /// (`[m, len]`), leaving zeros in `x`.
    pub fn split(&self, x: &mut [f32], in_cols: usize, xo: &mut Vec<f32>) {
        xo.clear();
        for row in x.chunks_exact_mut(in_cols) {
            for &c in self.cols.iter() {
                xo.push(std::mem::take(&mut row[c as usize]));
            }
        }
    }

    /// `y[m × rows] += xo · W_oᵀ`, with `tmp` as the product's buffer.
    pub fn add(
        &self,
        pool: &ThreadPool,
        xo: &[f32],
        m: usize,
        y: &mut [f32],
        tmp: &mut Vec<f32>,
        scratch: &mut Scratch,
    ) {
        let rows = self.weight.rows();
        tmp.resize(m * rows, 0.0);
        self.weight
            .product(pool, &xo[..m * self.cols.len()], m, tmp, scratch);
        y[..m * rows]
            .iter_mut()
            .zip(tmp.iter())
            .for_each(|(v, o)| *v += o);
    }
}

#[cfg(test)]
mod tests {
    use kestrel_kernels::{DType, SharedBytes};

    use super::*;
    use crate::layers::Linear;
    use crate::weights::TensorView;

    /// `values` as rows of `cols` in `dtype` (INT8 or F16), with the reference quantizer.
    fn encode_rows(dtype: DType, values: &[f32], cols: usize) -> Vec<u8> {
        match dtype {
            DType::F16 => values
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect(),
            DType::INT8 => {
                let row_bytes = DType::INT8.row_bytes(cols).expect("whole INT8 rows");
                let mut out = vec![0u8; values.len() / cols * row_bytes];
                for (src, dst) in values
                    .chunks_exact(cols)
                    .zip(out.chunks_exact_mut(row_bytes))
                {
                    kestrel_kernels::quant::int8::quantize_row_ref(src, dst);
                }
                out
            }
            other => unreachable!("{other} is not used here"),
        }
    }

    fn view(name: &str, dtype: DType, values: &[f32], rows: usize, cols: usize) -> TensorView {
        TensorView {
            name: name.into(),
            dtype,
            shape: vec![rows, cols],
            data: SharedBytes::from_vec(encode_rows(dtype, values, cols)),
        }
    }

    fn linear(name: &str, dtype: DType, values: &[f32], rows: usize, cols: usize) -> Linear {
        Linear::new(view(name, dtype, values, rows, cols), None).unwrap()
    }

    fn matrix(name: &str, dtype: DType, values: &[f32], rows: usize, cols: usize) -> WeightMatrix {
        WeightMatrix::new(view(name, dtype, values, rows, cols)).unwrap()
    }

    fn max_error(l: &Linear, x: &[f32], m: usize, want: &[f64]) -> f64 {
        let pool = ThreadPool::new(1);
        let mut y = vec![0f32; m * l.rows()];
        l.forward(&pool, x, m, &mut y, &mut Scratch::default());
        y.iter()
            .zip(want)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max)
    }

    /// One input channel 300x larger than the rest: per-token INT8 activations lose the small
    /// channels unless that channel is computed apart.
    #[test]
    fn an_outlier_channel_computed_apart_keeps_the_small_ones() {
        let (m, rows, cols, hot) = (3, 8, 64, 5usize);
        let mut seed = 99u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let mut x: Vec<f32> = (0..m * cols).map(|_| rnd()).collect();
        (0..m).for_each(|t| x[t * cols + hot] = 150.0);
        let w: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
        let want: Vec<f64> = (0..m * rows)
            .map(|i| {
                (0..cols)
                    .map(|c| x[i / rows * cols + c] as f64 * w[i % rows * cols + c] as f64)
                    .sum()
            })
            .collect();

        let plain = linear("plain", DType::INT8, &w, rows, cols);
        let mut main = w.clone();
        let apart: Vec<f32> = main
            .chunks_exact_mut(cols)
            .map(|r| std::mem::take(&mut r[hot]))
            .collect();
        let o = OutlierColumns::new(
            "split",
            vec![hot as u32],
            matrix("o", DType::F16, &apart, rows, 1),
            rows,
            cols,
        )
        .unwrap();
        let split = linear("split", DType::INT8, &main, rows, cols).with_outliers(o);

        let (e_plain, e_split) = (
            max_error(&plain, &x, m, &want),
            max_error(&split, &x, m, &want),
        );
        assert!(
            e_split < e_plain / 4.0,
            "split {e_split} vs plain {e_plain}"
        );
        assert!(e_split < 0.1, "{e_split}");
    }

    #[test]
    fn channels_and_weights_must_agree() {
        let w = matrix("o", DType::F16, &[1.0; 8], 4, 2);
        let err = |cols: Vec<u32>, rows: usize| {
            OutlierColumns::new("t", cols, w.clone(), rows, 16)
                .unwrap_err()
                .to_string()
        };
        assert!(err(vec![3, 1], 4).contains("increasing"));
        assert!(err(vec![1, 16], 4).contains("below 16"));
        assert!(err(vec![1, 2], 5).contains("expected 5x2"));
        assert!(OutlierColumns::new("t", vec![1, 2], w.clone(), 4, 16).is_ok());
    }
}
