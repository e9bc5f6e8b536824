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

/// Q/K row order (see `kestrel_quant::convert::permute` for the diagram): within each head of
/// `hd` rows, llama.cpp's row `2j + s` is Hugging Face's row `s·hd/2 + j`. Reorders the rows of
/// `[n_heads·hd, cols]` `data` from HF order into llama.cpp's (`to_llama_cpp`) or back.
pub fn reorder_qk_rows(data: &[f32], n_heads: usize, cols: usize, to_llama_cpp: bool) -> Vec<f32> {
    let rows = data.len() / cols.max(1);
    let hd = rows / n_heads.max(1);
    let mut out = data.to_vec();
    for h in 0..n_heads {
        for j in 0..hd / 2 {
            for s in 0..2 {
                let llama = h * hd + 2 * j + s;
                let hf = h * hd + s * hd / 2 + j;
                let (dst, src) = if to_llama_cpp {
                    (llama, hf)
                } else {
                    (hf, llama)
                };
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qk_reorder_matches_the_row_formula_and_inverts() {
        // Two heads of 4 rows, 1 column: llama.cpp's rows hold HF rows [0 2 1 3 | 4 6 5 7].
        let rows: Vec<f32> = (0..8).map(|r| r as f32).collect();
        let llama = reorder_qk_rows(&rows, 2, 1, true);
        assert_eq!(llama, vec![0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
        let m: Vec<f32> = (0..48).map(|v| v as f32).collect();
        assert_eq!(
            reorder_qk_rows(&reorder_qk_rows(&m, 2, 6, true), 2, 6, false),
            m
        );
    }
}
