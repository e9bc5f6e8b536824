//! [`LoraBase`]: what an adapter must fit: the shape of every projection of the base model,
//! and the row order its Q/K weights are stored in.

use kestrel_kernels::cpu::ops::RopeStyle;

use super::target::LoraTarget;
use crate::arch::TensorNaming;
use crate::config::{MlpKind, ModelConfig};

/// The projections of a base model that adapters may change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoraBase {
    /// Per layer, per [`LoraTarget::index`]: `(rows, cols)` of the projection, `None` where
    /// the layer has none an adapter can change (no gate in a plain MLP, sparse MoE MLPs).
    pub shapes: Vec<[Option<(usize, usize)>; 7]>,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Whether the base's Q/K rows are in llama.cpp's permuted order (interleaved RoPE).
    pub qk_permuted: bool,
    /// Whether llama.cpp's converter permutes Q/K rows for this architecture (so a llama.cpp
    /// adapter GGUF's Q/K deltas are permuted).
    pub arch_permutes: bool,
}

impl LoraBase {
    /// The base model of `cfg`, its weights named (and ordered) as `naming`.
    pub fn of(cfg: &ModelConfig, naming: TensorNaming) -> LoraBase {
        let (h, q, kv, f) = (
            cfg.hidden_size,
            cfg.n_heads * cfg.head_dim,
            cfg.n_kv_heads * cfg.head_dim,
            cfg.intermediate_size,
        );
        let gated = cfg.architecture.layout().mlp == MlpKind::GatedSilu;
        let shapes = (0..cfg.n_layers)
            .map(|i| {
                let dense = !cfg.moe.as_ref().is_some_and(|m| m.is_sparse(i));
                let mlp = |s: (usize, usize)| dense.then_some(s);
                [
                    Some((q, h)),
                    Some((kv, h)),
                    Some((kv, h)),
                    Some((h, q)),
                    mlp((f, h)).filter(|_| gated),
                    mlp((f, h)),
                    mlp((h, f)),
                ]
            })
            .collect();
        let interleaved = cfg.architecture.gguf_rope_style() == RopeStyle::Interleaved;
        LoraBase {
            shapes,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            qk_permuted: interleaved && naming == TensorNaming::Gguf,
            arch_permutes: interleaved,
        }
    }

    /// `(rows, cols)` of `target` in `layer`, if an adapter may change it.
    pub fn shape(&self, layer: usize, target: LoraTarget) -> Option<(usize, usize)> {
        self.shapes.get(layer)?[target.index()]
    }

    pub fn n_layers(&self) -> usize {
        self.shapes.len()
    }
}
