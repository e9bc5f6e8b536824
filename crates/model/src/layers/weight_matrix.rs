//! [`WeightMatrix`]: a `[rows, cols]` weight matrix of any [`DType`] and its product
//! `y = x · Wᵀ`; the weights stay in their file format, or are repacked into interleaved
//! panels ([`WeightMatrix::packed`]) where the CPU has kernels for them.

use std::sync::Arc;

use kestrel_kernels::cpu::gemm::{matmul, MatRef, Scratch};
use kestrel_kernels::cpu::packed::{matmul_packed, worth_packing, PackedMatrix};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::{DType, SharedBytes};

use crate::error::ModelError;
use crate::weights::TensorView;

/// Weights with `rows` outputs and `cols` inputs.
#[derive(Debug, Clone)]
pub struct WeightMatrix {
    dtype: DType,
    rows: usize,
    cols: usize,
    /// The weights in their file format; empty once packed.
    data: SharedBytes,
    packed: Option<Arc<PackedMatrix>>,
}

impl WeightMatrix {
    /// Wrap a `[rows, cols]` tensor, checking its byte size against its type.
    pub fn new(view: TensorView) -> Result<WeightMatrix, ModelError> {
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
        Ok(WeightMatrix {
            dtype: view.dtype,
            rows,
            cols,
            data: view.data,
            packed: None,
        })
    }

    /// Repack the weights into interleaved panels when this CPU has a packed kernel for their
    /// type and shape (see `kestrel_kernels::cpu::packed`); otherwise unchanged. The file-format
    /// bytes are released.
    pub fn packed(mut self) -> WeightMatrix {
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

    /// [`packed`](Self::packed) for matrices of one type and shape (a layer's experts), into
    /// one shared buffer so that matrices smaller than a huge page still sit on huge pages.
    /// Matrices that cannot be packed together are packed one by one.
    pub fn packed_group(ms: Vec<WeightMatrix>) -> Vec<WeightMatrix> {
        let Some(first) = ms.first() else { return ms };
        let (dtype, rows, cols) = (first.dtype, first.rows, first.cols);
        let together = worth_packing(dtype, rows)
            && ms
                .iter()
                .all(|m| m.packed.is_none() && (m.dtype, m.rows, m.cols) == (dtype, rows, cols));
        let group = together
            .then(|| {
                let datas: Vec<&[u8]> = ms.iter().map(|m| &m.data[..]).collect();
                PackedMatrix::pack_group(dtype, rows, cols, &datas)
            })
            .flatten();
        let Some(group) = group else {
            return ms.into_iter().map(WeightMatrix::packed).collect();
        };
        ms.into_iter()
            .zip(group)
            .map(|(mut m, p)| {
                m.packed = Some(Arc::new(p));
                m.data.release_resident();
                m.data = SharedBytes::from_vec(Vec::new());
                m
            })
            .collect()
    }

    /// Moves the repacked weights of `ms` into one shared buffer (see
    /// [`PackedMatrix::share_buffer`]); matrices that are not repacked, or whose packed weights
    /// are already shared with a clone, are left as they are.
    pub fn share_buffer(ms: &mut [&mut WeightMatrix]) {
        let mut packed: Vec<&mut PackedMatrix> = ms
            .iter_mut()
            .filter_map(|m| m.packed.as_mut().and_then(Arc::get_mut))
            .collect();
        if packed.len() > 1 {
            PackedMatrix::share_buffer(&mut packed);
        }
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

    /// The repacked weights, if [`packed`](Self::packed) repacked them.
    pub fn packed_matrix(&self) -> Option<&PackedMatrix> {
        self.packed.as_deref()
    }

    /// Bytes of weight data.
    pub fn n_bytes(&self) -> usize {
        self.packed
            .as_ref()
            .map_or(self.data.len(), |p| p.n_bytes())
    }

    /// `y[m × rows] = x[m × cols] · Wᵀ`, `x` in stored column order.
    pub fn product(&self, pool: &ThreadPool, x: &[f32], m: usize, y: &mut [f32], s: &mut Scratch) {
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

    /// Dequantize row `r` into `out` (in stored column order).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        if let Some(p) = &self.packed {
            return p.dequantize_row(r, out);
        }
        let row_bytes = self.data.len() / self.rows;
        let src = &self.data[r * row_bytes..(r + 1) * row_bytes];
        kestrel_kernels::quant::dequantize_row(self.dtype, src, &mut out[..self.cols]);
    }
}
