//! [`LayerNorm`]: `(x − mean) / sqrt(var + eps) · w + b`, one row at a time (BLOOM).

use kestrel_kernels::cpu::ops::layer_norm;

use crate::error::ModelError;
use crate::weights::TensorView;

#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl LayerNorm {
    /// From the weight and bias tensors, which must have the same length.
    pub fn new(weight: TensorView, bias: TensorView, eps: f32) -> Result<LayerNorm, ModelError> {
        if bias.shape != weight.shape {
            return Err(ModelError::BadShape {
                name: bias.name.clone(),
                expected: weight.shape.clone(),
                actual: bias.shape.clone(),
            });
        }
        Ok(LayerNorm {
            weight: crate::layers::to_f32_vec(&weight)?,
            bias: crate::layers::to_f32_vec(&bias)?,
            eps,
        })
    }

    /// Normalize each of the rows of `x` (row length = weight length) into `out`.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        let h = self.weight.len();
        for (xr, or) in x.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
            layer_norm(xr, &self.weight, &self.bias, self.eps, or);
        }
    }
}
