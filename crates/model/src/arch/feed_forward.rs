//! [`FeedForward`]: the MLP half of a decoder layer — norm, gated projection
//! (`down(act(gate(x)) * up(x))`) and the residual add.

use kestrel_kernels::cpu::ops::{add_assign, silu_mul};
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::decoder::DecoderDims;
use super::naming::LayerTensor;
use super::observer::{ActivationObserver, LinearSite};
use super::tensor_loader::TensorLoader;
use super::workspace::Workspace;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{Linear, RmsNorm};

pub(crate) struct FeedForward {
    norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl FeedForward {
    pub fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        d: &DecoderDims,
    ) -> Result<FeedForward, ModelError> {
        Ok(FeedForward {
            norm: ld.layer_norm(i, LayerTensor::FfnNorm, d.hidden, cfg.rms_norm_eps)?,
            gate: ld.linear(i, LayerTensor::Gate, d.ffn, d.hidden)?,
            up: ld.linear(i, LayerTensor::Up, d.ffn, d.hidden)?,
            down: ld.linear(i, LayerTensor::Down, d.hidden, d.ffn)?,
        })
    }

    /// The stored bytes of the block's projections.
    pub fn weight_bytes(&self) -> usize {
        [&self.gate, &self.up, &self.down]
            .iter()
            .map(|x| x.n_bytes())
            .sum()
    }

    /// Layer `l`'s MLP over the `t` rows of the residual stream `ws.x`, added to it.
    pub fn forward(
        &self,
        l: usize,
        d: &DecoderDims,
        t: usize,
        ws: &mut Workspace,
        pool: &ThreadPool,
        observer: &mut dyn ActivationObserver,
    ) {
        self.norm
            .forward(&ws.x[..t * d.hidden], &mut ws.h[..t * d.hidden]);
        observer.observe(l, LinearSite::GateUp, &ws.h[..t * d.hidden], t);
        self.gate
            .forward(pool, &ws.h, t, &mut ws.gate, &mut ws.scratch);
        self.up.forward(pool, &ws.h, t, &mut ws.up, &mut ws.scratch);
        silu_mul(&mut ws.gate[..t * d.ffn], &ws.up[..t * d.ffn]);
        observer.observe(l, LinearSite::Down, &ws.gate[..t * d.ffn], t);
        self.down
            .forward(pool, &ws.gate, t, &mut ws.h, &mut ws.scratch);
        add_assign(&mut ws.x[..t * d.hidden], &ws.h[..t * d.hidden]);
    }
}
