//! [`BlockNorm`]: the norm in front of a block (and of the LM head): RMSNorm (the Llama
//! family) or LayerNorm with a bias (BLOOM).

use super::{LayerNorm, RmsNorm};

#[derive(Debug, Clone)]
pub enum BlockNorm {
    Rms(RmsNorm),
    Layer(LayerNorm),
}

impl BlockNorm {
    /// Normalize each row of `x` into `out`.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        match self {
            BlockNorm::Rms(n) => n.forward(x, out),
            BlockNorm::Layer(n) => n.forward(x, out),
        }
    }
}
