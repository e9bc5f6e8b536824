//! [`Linear`]: `y = x · Wᵀ (+ b)` over a weight matrix of any [`DType`].

use std::cell::RefCell;
use std::sync::Arc;

use kestrel_kernels::cpu::gemm::{matmul, MatRef, Scratch};
use kestrel_kernels::cpu::packed::{matmul_packed, worth_packing, PackedMatrix};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::{DType, SharedBytes};

use super::outlier_columns::OutlierColumns;
use crate::error::ModelError;
use crate::weights::TensorView;

/// A dense layer with `rows` outputs and `cols` inputs; weights stay in their file format, or
/// are repacked into interleaved panels ([`Linear::packed`]) where the CPU has kernels for them.
#[derive(Debug, Clone)]
pub struct Linear {
    dtype: DType,
    rows: usize,
    cols: usize,
    /// The weights in their file format; empty once packed.
    data: SharedBytes,
    packed: Option<Arc<PackedMatrix>>,
    bias: Option<Vec<f32>>,
    /// Stored column `j` multiplies input column `perm[j]` (GPTQ act-order checkpoints).
    perm: Option<Arc<[u32]>>,
    /// Input channels computed in higher precision beside the main weights (INT8 with
    /// outlier decomposition).
    outliers: Option<Arc<OutlierColumns>>,
}

/// Per-thread buffers of the layers that rearrange their input, reused across calls.
struct InputBuffers {
    /// The input, gathered into stored column order, outlier channels zeroed.
    main: Vec<f32>,
    /// The outlier channels, `[m, n_outliers]`.
    outliers: Vec<f32>,
    /// The outlier product.
    product: Vec<f32>,
}

thread_local! {
    static INPUTS: RefCell<InputBuffers> =
        const { RefCell::new(InputBuffers { main: Vec::new(), outliers: Vec::new(), product: Vec::new() }) };
}

impl Linear {
    /// Wrap a `[rows, cols]` tensor, checking its byte size against its type.
    pub fn new(view: TensorView, bias: Option<Vec<f32>>) -> Result<Linear, ModelError> {
        let [rows, cols] = view.shape[..] else {
            return Err(ModelError::BadTensor {
                name: view.name,
                reason: format!("expected a matrix, got shape {:?}", view.shape),
            });
        };
        let row_bytes = view
            .dtype
            .row_bytes(cols)
            .ok_or_else(|| ModelError::BadTensor {
                name: view.name.clone(),
                reason: format!(
                    "{cols} columns is not a multiple of the {} block size",
                    view.dtype
                ),
            })?;
        if view.data.len() != rows * row_bytes {
            return Err(ModelError::BadTensor {
                name: view.name,
                reason: format!(
                    "{} bytes of data, expected {}",
                    view.data.len(),
                    rows * row_bytes
                ),
            });
        }
        if let Some(b) = &bias {
            if b.len() != rows {
                return Err(ModelError::BadShape {
                    name: format!("{}.bias", view.name),
                    expected: vec![rows],
                    actual: vec![b.len()],
                });
            }
        }
        Ok(Linear {
            dtype: view.dtype,
            rows,
            cols,
            data: view.data,
            packed: None,
            bias,
            perm: None,
            outliers: None,
        })
    }

    /// Repack the weights into interleaved panels when this CPU has a packed kernel for their
    /// type and shape (see `kestrel_kernels::cpu::packed`); otherwise unchanged. The file-format
    /// bytes are released.
    pub fn packed(mut self) -> Linear {
        if self.packed.is_some() || !worth_packing(self.dtype, self.rows) {
            return self;
        }
        if let Some(p) = PackedMatrix::pack(self.dtype, self.rows, self.cols, &self.data) {
            self.packed = Some(Arc::new(p));
            self.data.release_resident();
            self.data = SharedBytes::from_vec(Vec::new());
        }
        self
    }

    /// Read input column `perm[j]` where the weights have column `j` (the weights were stored
    /// in a permuted column order). `perm` must be a permutation of `0..cols`.
    pub fn with_input_perm(mut self, name: &str, perm: Vec<u32>) -> Result<Linear, ModelError> {
        let mut seen = vec![false; self.cols];
        let valid = perm.len() == self.cols
            && perm.iter().all(|&p| {
                (p as usize) < self.cols && !std::mem::replace(&mut seen[p as usize], true)
            });
        if !valid {
            return Err(ModelError::BadTensor {
                name: name.into(),
                reason: format!("input permutation is not a permutation of 0..{}", self.cols),
            });
        }
        self.perm = Some(perm.into());
        Ok(self)
    }

    /// Compute `outliers`' input channels from their own weights (the main weights hold zeros
    /// there). Channel indices are in stored column order.
    pub fn with_outliers(mut self, outliers: OutlierColumns) -> Linear {
        self.outliers = Some(Arc::new(outliers));
        self
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes of weight data (outlier weights included).
    pub fn n_bytes(&self) -> usize {
        let main = self
            .packed
            .as_ref()
            .map_or(self.data.len(), |p| p.n_bytes());
        main + self.outliers.as_ref().map_or(0, |o| o.n_bytes())
    }

    /// `y[m × rows] = x[m × cols] · Wᵀ (+ b)`.
    pub fn forward(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        m: usize,
        y: &mut [f32],
        scratch: &mut Scratch,
    ) {
        let (x, out) = (&x[..m * self.cols], &mut y[..m * self.rows]);
        if self.perm.is_none() && self.outliers.is_none() {
            self.product(pool, x, m, out, scratch);
        } else {
            INPUTS.with(|b| {
                let b = &mut *b.borrow_mut();
                self.gather(x, &mut b.main);
                if let Some(o) = &self.outliers {
                    o.split(&mut b.main, self.cols, &mut b.outliers);
                }
                self.product(pool, &b.main, m, out, scratch);
                if let Some(o) = &self.outliers {
                    o.add(pool, &b.outliers, m, out, &mut b.product, scratch);
                }
            });
        }
        if let Some(bias) = &self.bias {
            for row in y[..m * self.rows].chunks_exact_mut(self.rows) {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
        }
    }

    /// The weight product alone, `x` already in stored column order.
    fn product(&self, pool: &ThreadPool, x: &[f32], m: usize, y: &mut [f32], s: &mut Scratch) {
        match &self.packed {
            Some(p) => matmul_packed(pool, p, x, m, y, s),
            None => {
                let w = MatRef {
                    dtype: self.dtype,
                    rows: self.rows,
                    cols: self.cols,
                    data: &self.data,
                };
                matmul(pool, w, x, m, y, s)
            }
        }
    }

    /// `x` in stored column order.
    fn gather(&self, x: &[f32], out: &mut Vec<f32>) {
        out.clear();
        match &self.perm {
            None => out.extend_from_slice(x),
            Some(perm) => {
                for row in x.chunks_exact(self.cols) {
                    out.extend(perm.iter().map(|&p| row[p as usize]));
                }
            }
        }
    }

    /// Dequantize row `r` into `out` (used for embedding lookups through a tied head; in stored
    /// column order).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        if let Some(p) = &self.packed {
            return p.dequantize_row(r, out);
        }
        let row_bytes = self.data.len() / self.rows;
        let src = &self.data[r * row_bytes..(r + 1) * row_bytes];
        kestrel_kernels::quant::dequantize_row(self.dtype, src, &mut out[..self.cols]);
    }
}
