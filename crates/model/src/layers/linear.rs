//! [`Linear`]: `y = x · Wᵀ (+ b)` over a [`WeightMatrix`] of any [`DType`], with an optional
//! input permutation (GPTQ act-order) and outlier channels (INT8 with outlier decomposition).

use std::cell::RefCell;
use std::sync::Arc;

use kestrel_kernels::cpu::gemm::Scratch;
use kestrel_kernels::cpu::packed::PackedMatrix;
use kestrel_kernels::cpu::packed::{can_share_input, matmul_packed_many};
use kestrel_kernels::cpu::threadpool::ThreadPool;
use kestrel_kernels::DType;

use super::outlier_columns::OutlierColumns;
use super::weight_matrix::WeightMatrix;
use crate::error::ModelError;
use crate::weights::TensorView;

/// A dense layer with `rows` outputs and `cols` inputs; weights stay in their file format, or
/// are repacked into interleaved panels ([`Linear::packed`]) where the CPU has kernels for them.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: WeightMatrix,
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
        let name = view.name.clone();
        let weight = WeightMatrix::new(view)?;
        if let Some(b) = &bias {
            if b.len() != weight.rows() {
                return Err(ModelError::BadShape {
                    name: format!("{name}.bias"),
                    expected: vec![weight.rows()],
                    actual: vec![b.len()],
                });
            }
        }
        Ok(Linear {
            weight,
            bias,
            perm: None,
            outliers: None,
        })
    }

    /// Repack the weights into interleaved panels when this CPU has a packed kernel for their
    /// type and shape (see `kestrel_kernels::cpu::packed`); otherwise unchanged. The file-format
    /// bytes are released.
    pub fn packed(mut self) -> Linear {
        self.weight = self.weight.packed();
        self
    }

    /// [`packed`](Self::packed) for layers of one weight type and shape (a layer's experts),
    /// sharing one buffer (see [`WeightMatrix::packed_group`]).
    pub fn packed_group(layers: Vec<Linear>) -> Vec<Linear> {
        let (weights, rest): (Vec<_>, Vec<_>) = layers
            .into_iter()
            .map(|l| (l.weight, (l.bias, l.perm, l.outliers)))
            .unzip();
        WeightMatrix::packed_group(weights)
            .into_iter()
            .zip(rest)
            .map(|(weight, (bias, perm, outliers))| Linear {
                weight,
                bias,
                perm,
                outliers,
            })
            .collect()
    }

    /// Moves the repacked weights of `layers` into one shared buffer (see
    /// [`WeightMatrix::share_buffer`]).
    pub fn share_buffer(layers: &mut [&mut Linear]) {
        let mut weights: Vec<&mut WeightMatrix> =
            layers.iter_mut().map(|l| &mut l.weight).collect();
        WeightMatrix::share_buffer(&mut weights);
    }

    /// Read input column `perm[j]` where the weights have column `j` (the weights were stored
    /// in a permuted column order). `perm` must be a permutation of `0..cols`.
    pub fn with_input_perm(mut self, name: &str, perm: Vec<u32>) -> Result<Linear, ModelError> {
        let cols = self.cols();
        let mut seen = vec![false; cols];
        let valid = perm.len() == cols
            && perm
                .iter()
                .all(|&p| (p as usize) < cols && !std::mem::replace(&mut seen[p as usize], true));
        if !valid {
            return Err(ModelError::BadTensor {
                name: name.into(),
                reason: format!("input permutation is not a permutation of 0..{cols}"),
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
        self.weight.rows()
    }

    pub fn cols(&self) -> usize {
        self.weight.cols()
    }

    pub fn dtype(&self) -> DType {
        self.weight.dtype()
    }

    /// Bytes of weight data (outlier weights included).
    pub fn n_bytes(&self) -> usize {
        self.weight.n_bytes() + self.outliers.as_ref().map_or(0, |o| o.n_bytes())
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
        let (rows, cols) = (self.rows(), self.cols());
        let (x, out) = (&x[..m * cols], &mut y[..m * rows]);
        if self.perm.is_none() && self.outliers.is_none() {
            self.weight.product(pool, x, m, out, scratch);
        } else {
            INPUTS.with(|b| {
                let b = &mut *b.borrow_mut();
                self.gather(x, &mut b.main);
                if let Some(o) = &self.outliers {
                    o.split(&mut b.main, cols, &mut b.outliers);
                }
                self.weight.product(pool, &b.main, m, out, scratch);
                if let Some(o) = &self.outliers {
                    o.add(pool, &b.outliers, m, out, &mut b.product, scratch);
                }
            });
        }
        self.add_bias(&mut y[..m * rows]);
    }

    /// `y_k = x · W_kᵀ (+ b_k)` for layers that read the same input `x` (Q/K/V, gate/up). Where
    /// all are repacked plain layers of one kind, `x` is quantized once and the products run
    /// in one pool call (see `matmul_packed_many`); otherwise one [`forward`](Self::forward)
    /// each. The results are the same either way.
    pub fn forward_many<const N: usize>(
        layers: [&Linear; N],
        pool: &ThreadPool,
        x: &[f32],
        m: usize,
        ys: [&mut [f32]; N],
        scratch: &mut Scratch,
    ) {
        let Some(packed) = Self::shared_packed(layers) else {
            for (layer, y) in layers.into_iter().zip(ys) {
                layer.forward(pool, x, m, y, scratch);
            }
            return;
        };
        let cols = layers.first().map_or(0, |l| l.cols());
        let mut ys = ys;
        for (y, layer) in ys.iter_mut().zip(layers) {
            *y = &mut std::mem::take(y)[..m * layer.rows()];
        }
        let reborrowed = ys.each_mut().map(|y| &mut **y);
        matmul_packed_many(pool, packed, &x[..m * cols], m, reborrowed, scratch);
        for (layer, y) in layers.iter().zip(ys) {
            layer.add_bias(y);
        }
    }

    /// The layers' repacked weights if all are plain (no permutation, no outliers), repacked,
    /// and of one kind and width.
    fn shared_packed<const N: usize>(layers: [&Linear; N]) -> Option<[&PackedMatrix; N]> {
        let packed = layers.map(|l| l.plain_packed());
        let first = (*packed.first()?)?;
        if packed.iter().any(Option::is_none) {
            return None;
        }
        let packed = packed.map(|p| p.unwrap_or(first));
        can_share_input(&packed).then_some(packed)
    }

    /// The repacked weight of a plain layer (no column permutation, no outlier columns): its
    /// product is the packed product alone, plus the bias if it has one.
    pub fn plain_packed(&self) -> Option<&PackedMatrix> {
        if self.perm.is_some() || self.outliers.is_some() {
            return None;
        }
        self.weight.packed_matrix()
    }

    pub fn has_bias(&self) -> bool {
        self.bias.is_some()
    }

    /// Adds the bias (if any) to every row of `y`.
    fn add_bias(&self, y: &mut [f32]) {
        if let Some(bias) = &self.bias {
            for row in y.chunks_exact_mut(self.rows()) {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
        }
    }

    /// `x` in stored column order.
    fn gather(&self, x: &[f32], out: &mut Vec<f32>) {
        out.clear();
        match &self.perm {
            None => out.extend_from_slice(x),
            Some(perm) => {
                for row in x.chunks_exact(self.cols()) {
                    out.extend(perm.iter().map(|&p| row[p as usize]));
                }
            }
        }
    }

    /// Dequantize row `r` into `out` (used for embedding lookups through a tied head; in stored
    /// column order).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        self.weight.dequantize_row(r, out)
    }
}
