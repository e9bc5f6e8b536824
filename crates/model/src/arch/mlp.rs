//! [`Mlp`]: the MLP half of a decoder layer, dense ([`FeedForward`]) or sparse ([`MoeBlock`]).

use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::decoder::DecoderDims;
use super::feed_forward::FeedForward;
use super::moe_block::{ExpertCounter, MoeBlock};
use super::observer::ActivationObserver;
use super::tensor_loader::TensorLoader;
use super::workspace::Workspace;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::Linear;
use crate::lora::LoraBatch;

/// The rows an MLP runs on: `t` rows of the residual stream, and their adapters.
pub(crate) struct MlpIo<'a> {
    pub t: usize,
    pub lora: &'a LoraBatch,
}

pub(crate) enum Mlp {
    Dense(FeedForward),
    Moe(MoeBlock),
}

impl Mlp {
    /// The dense projections, for [`Linear::share_buffer`] (a sparse layer's experts already
    /// share a buffer per projection).
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            Mlp::Dense(f) => f.linears_mut(),
            Mlp::Moe(_) => Vec::new(),
        }
    }

    /// Layer `i`'s MLP: sparse where the config's MoE marks the layer, else dense.
    pub fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        d: &DecoderDims,
        counter: Option<ExpertCounter>,
    ) -> Result<Mlp, ModelError> {
        match &cfg.moe {
            Some(moe) if moe.is_sparse(i) => {
                Ok(Mlp::Moe(MoeBlock::load(ld, i, cfg, moe, counter)?))
            }
            _ => Ok(Mlp::Dense(FeedForward::load(ld, i, cfg, d)?)),
        }
    }

    pub fn weight_bytes(&self) -> usize {
        match self {
            Mlp::Dense(f) => f.weight_bytes(),
            Mlp::Moe(m) => m.weight_bytes(),
        }
    }

    /// The stored bytes one token reads: all of a dense MLP, a sparse one's router, shared
    /// expert and `top_k` experts.
    pub fn token_weight_bytes(&self) -> usize {
        match self {
            Mlp::Dense(f) => f.weight_bytes(),
            Mlp::Moe(m) => m.token_weight_bytes(),
        }
    }

    /// Layer `l`'s MLP over the `t` rows of `ws.x`, added to it. (The observer sees dense
    /// layers' inputs only.)
    pub fn forward(
        &self,
        l: usize,
        d: &DecoderDims,
        io: MlpIo<'_>,
        ws: &mut Workspace,
        pool: &ThreadPool,
        observer: &mut dyn ActivationObserver,
    ) {
        match self {
            Mlp::Dense(f) => f.forward(l, d, io, ws, pool, observer),
            Mlp::Moe(m) => m.forward(d.hidden, io.t, ws, pool),
        }
    }

    pub fn as_moe(&self) -> Option<&MoeBlock> {
        match self {
            Mlp::Moe(m) => Some(m),
            Mlp::Dense(_) => None,
        }
    }
}
