//! [`DecoderDims`]: the sizes of a decoder the forward pass needs, taken from its
//! [`ModelConfig`].

use crate::config::ModelConfig;

/// Sizes the forward pass needs.
#[derive(Debug, Clone, Copy)]
pub struct DecoderDims {
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub n_layers: usize,
    /// The cache holds one key row per token whose prefix is the value (latent attention), no
    /// value rows.
    pub keys_only: bool,
}

impl DecoderDims {
    /// The sizes of `cfg`.
    pub(crate) fn of(cfg: &ModelConfig) -> DecoderDims {
        DecoderDims {
            hidden: cfg.hidden_size,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            ffn: cfg.intermediate_size,
            vocab: cfg.vocab_size,
            n_layers: cfg.n_layers,
            keys_only: cfg.mla.is_some(),
        }
    }
}
