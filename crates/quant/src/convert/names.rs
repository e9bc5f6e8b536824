//! [`NameMap`]: GGUF ⇄ HF tensor names for a Llama-family model, built from the one naming
//! table the loader uses ([`TensorNaming`]).

use std::collections::HashMap;

use kestrel_model::arch::naming::{LayerTensor, TensorNaming};

const LAYER_TENSORS: [LayerTensor; 9] = [
    LayerTensor::AttnNorm,
    LayerTensor::Q,
    LayerTensor::K,
    LayerTensor::V,
    LayerTensor::O,
    LayerTensor::FfnNorm,
    LayerTensor::Gate,
    LayerTensor::Up,
    LayerTensor::Down,
];

/// Both directions of the tensor-name mapping for an `n_layers`-layer model.
pub struct NameMap {
    to_gguf: HashMap<String, String>,
    to_hf: HashMap<String, String>,
}

impl NameMap {
    pub fn new(n_layers: usize) -> NameMap {
        let (g, h) = (TensorNaming::Gguf, TensorNaming::HuggingFace);
        let mut pairs = vec![
            (g.embedding().to_string(), h.embedding().to_string()),
            (g.final_norm().to_string(), h.final_norm().to_string()),
            (g.output().to_string(), h.output().to_string()),
        ];
        for layer in 0..n_layers {
            for t in LAYER_TENSORS {
                for suffix in ["weight", "bias"] {
                    pairs.push((g.layer(layer, t, suffix), h.layer(layer, t, suffix)));
                }
            }
        }
        let to_hf = pairs.iter().cloned().collect();
        let to_gguf = pairs.into_iter().map(|(g, h)| (h, g)).collect();
        NameMap { to_gguf, to_hf }
    }

    /// The GGUF name of HF tensor `name`.
    pub fn gguf_name(&self, hf: &str) -> Option<&str> {
        self.to_gguf.get(hf).map(String::as_str)
    }

    /// The HF name of GGUF tensor `name`.
    pub fn hf_name(&self, gguf: &str) -> Option<&str> {
        self.to_hf.get(gguf).map(String::as_str)
    }
}

/// Whether GGUF tensor `name` is a query (`Some(false)`) or key (`Some(true)`) projection
/// whose rows are permuted for RoPE.
pub fn rope_permuted(gguf_name: &str) -> Option<bool> {
    let part = gguf_name.strip_prefix("blk.")?.split('.').nth(1)?;
    match part {
        "attn_q" => Some(false),
        "attn_k" => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways() {
        let m = NameMap::new(2);
        assert_eq!(
            m.gguf_name("model.layers.1.self_attn.k_proj.weight"),
            Some("blk.1.attn_k.weight")
        );
        assert_eq!(
            m.hf_name("blk.0.ffn_down.weight"),
            Some("model.layers.0.mlp.down_proj.weight")
        );
        assert_eq!(
            m.hf_name("token_embd.weight"),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(m.hf_name("blk.2.ffn_down.weight"), None);
        assert_eq!(rope_permuted("blk.3.attn_k.bias"), Some(true));
        assert_eq!(rope_permuted("blk.3.attn_q.weight"), Some(false));
        assert_eq!(rope_permuted("blk.3.attn_v.weight"), None);
    }
}
