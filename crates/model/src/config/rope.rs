//! Rotary inverse frequencies, with linear, Llama 3.1 and per-frequency-factor scaling.
//!
//! The base frequencies are `inv_freq[i] = theta^(-2i / head_dim)` for `i < head_dim / 2`.
//! Llama 3.1 scaling (as in HF transformers' `_compute_llama3_parameters`), with
//! `wavelen = 2 pi / inv_freq`, `low_wl = original_max_position / low_freq_factor` and
//! `high_wl = original_max_position / high_freq_factor`:
//!
//! ```text
//!   wavelen < high_wl           -> inv_freq                       (high frequencies kept)
//!   wavelen > low_wl            -> inv_freq / factor              (low frequencies scaled)
//!   otherwise, with s = (original_max_position / wavelen - low_freq_factor)
//!                       / (high_freq_factor - low_freq_factor):
//!                               -> (1 - s) * inv_freq / factor + s * inv_freq
//! ```
//! Everything is computed in `f64` and rounded to `f32` once at the end.

use super::{positive, ConfigError, ModelConfig, RopeScaling};

impl ModelConfig {
    /// The rotary inverse frequencies of layer `layer`: Gemma's sliding-window (local)
    /// layers use their own base and no scaling; every other layer [`Self::rope_inv_freq`].
    pub fn layer_rope_inv_freq(&self, layer: usize) -> Vec<f32> {
        match &self.gemma {
            Some(g) if self.layer_window(layer).is_some() => {
                let dim = self.head_dim as f64;
                let theta = f64::from(g.local_rope_theta);
                (0..self.head_dim / 2)
                    .map(|i| (1.0 / theta.powf((2 * i) as f64 / dim)) as f32)
                    .collect()
            }
            _ => self.rope_inv_freq(),
        }
    }

    /// The `head_dim / 2` rotary inverse frequencies, with `rope_scaling` applied.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        let dim = self.head_dim as f64;
        let theta = f64::from(self.rope_theta);
        let base = (0..self.head_dim / 2).map(|i| 1.0 / theta.powf((2 * i) as f64 / dim));
        let scaled: Vec<f64> = match &self.rope_scaling {
            None => base.collect(),
            Some(RopeScaling::Linear { factor }) => base.map(|f| f / f64::from(*factor)).collect(),
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            }) => {
                let p = Llama3Params {
                    factor: f64::from(*factor),
                    low: f64::from(*low_freq_factor),
                    high: f64::from(*high_freq_factor),
                    old_ctx: *original_max_position as f64,
                };
                base.map(|f| p.apply(f)).collect()
            }
            Some(RopeScaling::FreqFactors { factors }) => {
                base.zip(factors).map(|(f, &k)| f / f64::from(k)).collect()
            }
        };
        scaled.into_iter().map(|f| f as f32).collect()
    }
}

struct Llama3Params {
    factor: f64,
    low: f64,
    high: f64,
    old_ctx: f64,
}

impl Llama3Params {
    fn apply(&self, inv_freq: f64) -> f64 {
        let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
        let low_freq_wavelen = self.old_ctx / self.low;
        let high_freq_wavelen = self.old_ctx / self.high;
        if wavelen < high_freq_wavelen {
            inv_freq
        } else if wavelen > low_freq_wavelen {
            inv_freq / self.factor
        } else {
            let smooth = (self.old_ctx / wavelen - self.low) / (self.high - self.low);
            (1.0 - smooth) * inv_freq / self.factor + smooth * inv_freq
        }
    }
}

/// Check scaling parameters against `head_dim`.
pub(super) fn validate_scaling(scaling: &RopeScaling, head_dim: usize) -> Result<(), ConfigError> {
    match scaling {
        RopeScaling::Linear { factor } => positive("rope_scaling.factor", *factor),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position,
        } => {
            positive("rope_scaling.factor", *factor)?;
            positive("rope_scaling.low_freq_factor", *low_freq_factor)?;
            positive("rope_scaling.high_freq_factor", *high_freq_factor)?;
            if high_freq_factor <= low_freq_factor {
                return Err(ConfigError::Invalid(format!(
                    "rope_scaling.high_freq_factor ({high_freq_factor}) must exceed low_freq_factor ({low_freq_factor})"
                )));
            }
            if *original_max_position == 0 {
                return Err(ConfigError::Invalid(
                    "rope_scaling.original_max_position_embeddings is 0".into(),
                ));
            }
            Ok(())
        }
        RopeScaling::FreqFactors { factors } => {
            if factors.len() != head_dim / 2 {
                return Err(ConfigError::Invalid(format!(
                    "{} rope frequency factors for head_dim {head_dim} (expected {})",
                    factors.len(),
                    head_dim / 2
                )));
            }
            factors
                .iter()
                .try_for_each(|&k| positive("rope frequency factor", k))
        }
    }
}
