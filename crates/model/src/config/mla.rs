//! [`MlaConfig`]: multi-head latent attention (DeepSeek V2/V3). Queries come from the hidden
//! state directly (`q_proj`) or through a low-rank bottleneck (`q_a_proj`, its RMSNorm,
//! `q_b_proj`); keys and values from one shared compressed latent of `kv_lora_rank` values
//! (after `kv_a_layernorm`) plus a decoupled rotary key of `qk_rope_head_dim` shared by every
//! head. `kv_b_proj` expands the latent into each head's non-rotary key and its value.
//!
//! In a [`super::ModelConfig`] with MLA, `n_kv_heads` is 1 and `head_dim` is
//! `kv_lora_rank + qk_rope_head_dim`: the one cached row per token (the paged cache's
//! geometry); `rotary_dim` is `qk_rope_head_dim`.

use super::ConfigError;

#[derive(Debug, Clone, PartialEq)]
pub struct MlaConfig {
    /// The query bottleneck's width; `None`: one `q_proj` (V2-Lite).
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    /// The softmax scale: `(qk_nope + qk_rope)^-1/2`, times YaRN's `mscale(factor,
    /// mscale_all_dim)²` when the rope scaling sets `mscale_all_dim`.
    pub softmax_scale: f32,
}

impl MlaConfig {
    /// Query/key width of one head (`qk_nope_head_dim + qk_rope_head_dim`).
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// Values one token stores per layer: the latent and the rotary key.
    pub fn cached_dim(&self) -> usize {
        self.kv_lora_rank + self.qk_rope_head_dim
    }

    /// The softmax scale for these head sizes and YaRN's `mscale_all_dim` at `factor`
    /// (`None`: no such scaling).
    pub fn scale_for(qk_head_dim: usize, yarn_all_dim: Option<(f64, f64)>) -> f32 {
        let base = 1.0 / (qk_head_dim as f64).sqrt();
        let m = match yarn_all_dim {
            Some((factor, all_dim)) if all_dim != 0.0 => super::rope::yarn_mscale(factor, all_dim),
            _ => 1.0,
        };
        (base * m * m) as f32
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let sizes = [
            ("q_lora_rank", self.q_lora_rank.unwrap_or(1)),
            ("kv_lora_rank", self.kv_lora_rank),
            ("qk_nope_head_dim", self.qk_nope_head_dim),
            ("qk_rope_head_dim", self.qk_rope_head_dim),
            ("v_head_dim", self.v_head_dim),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid(format!("{name} is 0")));
        }
        if !self.qk_rope_head_dim.is_multiple_of(2) {
            return Err(ConfigError::Invalid(format!(
                "qk_rope_head_dim ({}) is odd; rotary needs pairs",
                self.qk_rope_head_dim
            )));
        }
        if !(self.softmax_scale.is_finite() && self.softmax_scale > 0.0) {
            return Err(ConfigError::Invalid(format!(
                "softmax scale {} is not a positive number",
                self.softmax_scale
            )));
        }
        Ok(())
    }
}
