//! [`RmsNorm`]: `x / rms(x) * w`, one row at a time.

use kestrel_kernels::cpu::ops::rms_norm;

use crate::error::ModelError;
use crate::weights::TensorView;

#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Vec<f32>,
    eps: f32,
}

impl RmsNorm {
    pub fn new(view: TensorView, eps: f32) -> Result<RmsNorm, ModelError> {
        Ok(RmsNorm {
            weight: crate::layers::to_f32_vec(&view)?,
            eps,
        })
    }

    /// Add `offset` to every weight (Gemma's `x / rms(x) · (1 + w)` with `w` as stored).
    pub fn with_offset(mut self, offset: f32) -> RmsNorm {
        if offset != 0.0 {
            self.weight.iter_mut().for_each(|w| *w += offset);
        }
        self
    }

    /// Normalize each of the rows of `x` (row length = weight length) into `out`.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        let h = self.weight.len();
        for (xr, or) in x.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
            rms_norm(xr, &self.weight, self.eps, or);
        }
    }
}
