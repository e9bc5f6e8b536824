//! [`Rotary`]: the rotary position embedding of one model — its inverse frequencies (scaling
//! applied, one per rotary pair, so partial rotary has fewer than `head_dim / 2`), the
//! attention factor YaRN and LongRoPE put on cos and sin, and the pairing of the weights.

use kestrel_kernels::cpu::ops::{rope_scaled, RopeStyle};

use crate::config::ModelConfig;

#[derive(Debug, Clone)]
pub struct Rotary {
    inv_freq: Vec<f32>,
    attention_factor: f32,
    style: RopeStyle,
}

impl Rotary {
    /// The rotary embedding `cfg` describes, for weights paired as `style`.
    pub fn new(cfg: &ModelConfig, style: RopeStyle) -> Rotary {
        Rotary {
            inv_freq: cfg.rope_inv_freq(),
            attention_factor: cfg.rope_attention_factor(),
            style,
        }
    }

    /// Rotate the `x.len() / head_dim` heads of `x` for position `pos`.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        rope_scaled(
            x,
            head_dim,
            pos,
            &self.inv_freq,
            self.style,
            self.attention_factor,
        );
    }

    /// The rotary embedding of `cfg`'s layer `layer` ([`ModelConfig::layer_rope_inv_freq`]).
    pub fn for_layer(cfg: &ModelConfig, layer: usize, style: RopeStyle) -> Rotary {
        Rotary {
            inv_freq: cfg.layer_rope_inv_freq(layer),
            attention_factor: cfg.rope_attention_factor(),
            style,
        }
    }

    pub fn inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    pub fn attention_factor(&self) -> f32 {
        self.attention_factor
    }

    pub fn style(&self) -> RopeStyle {
        self.style
    }
}
