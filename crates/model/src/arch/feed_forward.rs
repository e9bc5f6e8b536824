//! [`FeedForward`]: the MLP half of a decoder layer — norm, gated projection
//! (`down(act(gate(x)) * up(x))`), or without a gate `down(gelu_tanh(up(x)))` (BLOOM, with
//! biases), and the residual add.

use kestrel_kernels::cpu::ops::{add_assign, gelu_tanh, silu_mul};
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::decoder::DecoderDims;
use super::naming::LayerTensor;
use super::observer::{ActivationObserver, LinearSite};
use super::tensor_loader::TensorLoader;
use super::workspace::Workspace;
use crate::config::{MlpKind, ModelConfig};
use crate::error::ModelError;
use crate::layers::{BlockNorm, Linear};

pub(crate) struct FeedForward {
    norm: BlockNorm,
    /// `None`: the ungated GELU MLP ([`MlpKind::PlainGelu`]).
    gate: Option<Linear>,
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
        let layout = cfg.architecture.layout();
        let (eps, kind) = (cfg.rms_norm_eps, layout.norm);
        Ok(FeedForward {
            norm: ld.layer_block_norm(i, LayerTensor::FfnNorm, d.hidden, eps, kind)?,
            gate: match layout.mlp {
                MlpKind::GatedSilu => Some(ld.linear(i, LayerTensor::Gate, d.ffn, d.hidden)?),
                MlpKind::PlainGelu => None,
            },
            up: ld.linear(i, LayerTensor::Up, d.ffn, d.hidden)?,
            down: ld.linear(i, LayerTensor::Down, d.hidden, d.ffn)?,
        })
    }

    /// The stored bytes of the block's projections.
    pub fn weight_bytes(&self) -> usize {
        [self.gate.as_ref(), Some(&self.up), Some(&self.down)]
            .iter()
            .flatten()
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
        match &self.gate {
            Some(gate) => {
                gate.forward(pool, &ws.h, t, &mut ws.gate, &mut ws.scratch);
                self.up.forward(pool, &ws.h, t, &mut ws.up, &mut ws.scratch);
                silu_mul(&mut ws.gate[..t * d.ffn], &ws.up[..t * d.ffn]);
            }
            None => {
                self.up
                    .forward(pool, &ws.h, t, &mut ws.gate, &mut ws.scratch);
                gelu_tanh(&mut ws.gate[..t * d.ffn]);
            }
        }
        observer.observe(l, LinearSite::Down, &ws.gate[..t * d.ffn], t);
        self.down
            .forward(pool, &ws.gate, t, &mut ws.h, &mut ws.scratch);
        add_assign(&mut ws.x[..t * d.hidden], &ws.h[..t * d.hidden]);
    }
}
