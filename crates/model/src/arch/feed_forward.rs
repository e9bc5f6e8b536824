//! [`FeedForward`]: the MLP half of a decoder layer — norm, gated projection
//! (`down(act(gate(x)) * up(x))`, SwiGLU or GeGLU), or without a gate `down(gelu_tanh(up(x)))`
//! (BLOOM, with biases), an optional post-norm (Gemma) and the residual add.

use kestrel_kernels::cpu::ops::{add_assign, gelu_tanh, gelu_tanh_mul, silu_mul};
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::decoder::DecoderDims;
use super::mlp::MlpIo;
use super::naming::LayerTensor;
use super::observer::{ActivationObserver, LinearSite};
use super::rows::zip_rows;
use super::tensor_loader::TensorLoader;
use super::workspace::Workspace;
use crate::config::{MlpKind, ModelConfig};
use crate::error::ModelError;
use crate::layers::{BlockNorm, Linear, RmsNorm};
use crate::lora::{LoraSite, LoraTarget};

/// The gate's activation (gated MLPs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    /// SwiGLU (the Llama family).
    Silu,
    /// GeGLU with the tanh approximation of GELU (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

impl Activation {
    fn of(cfg: &ModelConfig) -> Activation {
        match cfg.gemma.is_some() {
            true => Activation::GeluTanh,
            false => Activation::Silu,
        }
    }

    /// `gate = act(gate) * up`.
    fn gate_mul(self, gate: &mut [f32], up: &[f32]) {
        match self {
            Activation::Silu => silu_mul(gate, up),
            Activation::GeluTanh => gelu_tanh_mul(gate, up),
        }
    }
}

pub(crate) struct FeedForward {
    norm: BlockNorm,
    /// `None`: the ungated GELU MLP ([`MlpKind::PlainGelu`]).
    gate: Option<Linear>,
    up: Linear,
    down: Linear,
    act: Activation,
    /// Gemma: RMSNorm of the MLP output before the residual add.
    post_norm: Option<RmsNorm>,
}

impl FeedForward {
    /// The projections, for [`Linear::share_buffer`].
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut out: Vec<&mut Linear> = self.gate.iter_mut().collect();
        out.extend([&mut self.up, &mut self.down]);
        out
    }

    pub fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        d: &DecoderDims,
    ) -> Result<FeedForward, ModelError> {
        let layout = cfg.architecture.layout();
        let (h, eps, kind, gemma) = (d.hidden, cfg.rms_norm_eps, layout.norm, cfg.gemma.is_some());
        let norm = match gemma {
            true => LayerTensor::PreFfnNorm,
            false => LayerTensor::FfnNorm,
        };
        Ok(FeedForward {
            norm: ld.layer_block_norm(i, norm, h, eps, kind)?,
            gate: match layout.mlp {
                MlpKind::GatedSilu => Some(ld.linear(i, LayerTensor::Gate, d.ffn, h)?),
                MlpKind::PlainGelu => None,
            },
            up: ld.linear(i, LayerTensor::Up, d.ffn, h)?,
            down: ld.linear(i, LayerTensor::Down, h, d.ffn)?,
            act: Activation::of(cfg),
            post_norm: match gemma {
                true => Some(ld.layer_norm(i, LayerTensor::PostFfnNorm, h, eps)?),
                false => None,
            },
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
        io: MlpIo<'_>,
        ws: &mut Workspace,
        pool: &ThreadPool,
        observer: &mut dyn ActivationObserver,
    ) {
        let (t, lora) = (io.t, io.lora);
        let (hn, fn_) = (t * d.hidden, t * d.ffn);
        zip_rows(pool, &mut ws.h[..hn], &ws.x[..hn], d.hidden, &|h, x| {
            self.norm.forward(x, h)
        });
        observer.observe(l, LinearSite::GateUp, &ws.h[..t * d.hidden], t);
        match &self.gate {
            Some(gate) => {
                Linear::forward_many(
                    [gate, &self.up],
                    pool,
                    &ws.h,
                    t,
                    [&mut ws.gate, &mut ws.up],
                    &mut ws.scratch,
                );
                let site = LoraSite {
                    layer: l,
                    target: LoraTarget::Gate,
                    x: &ws.h[..hn],
                    y: &mut ws.gate[..fn_],
                };
                lora.apply(site, pool, &mut ws.lora);
                let site = LoraSite {
                    layer: l,
                    target: LoraTarget::Up,
                    x: &ws.h[..hn],
                    y: &mut ws.up[..fn_],
                };
                lora.apply(site, pool, &mut ws.lora);
                zip_rows(pool, &mut ws.gate[..fn_], &ws.up[..fn_], d.ffn, &|g, u| {
                    self.act.gate_mul(g, u)
                });
            }
            None => {
                self.up
                    .forward(pool, &ws.h, t, &mut ws.gate, &mut ws.scratch);
                let site = LoraSite {
                    layer: l,
                    target: LoraTarget::Up,
                    x: &ws.h[..hn],
                    y: &mut ws.gate[..fn_],
                };
                lora.apply(site, pool, &mut ws.lora);
                gelu_tanh(&mut ws.gate[..t * d.ffn]);
            }
        }
        observer.observe(l, LinearSite::Down, &ws.gate[..t * d.ffn], t);
        self.down
            .forward(pool, &ws.gate, t, &mut ws.h, &mut ws.scratch);
        let site = LoraSite {
            layer: l,
            target: LoraTarget::Down,
            x: &ws.gate[..fn_],
            y: &mut ws.h[..hn],
        };
        lora.apply(site, pool, &mut ws.lora);
        let added = match &self.post_norm {
            Some(norm) => {
                norm.forward(&ws.h[..hn], &mut ws.normed[..hn]);
                &ws.normed[..hn]
            }
            None => &ws.h[..hn],
        };
        zip_rows(pool, &mut ws.x[..hn], added, d.hidden, &|x, y| {
            add_assign(x, y)
        });
    }
}
