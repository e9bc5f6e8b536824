//! Rotary inverse frequencies and attention factor, for every [`RopeScaling`], following
//! transformers' `ROPE_INIT_FUNCTIONS` (`modeling_rope_utils.py`).
//!
//! With `dim` the rotary dimensions ([`ModelConfig::rotary_dim`]), the base frequencies are
//! `inv_freq[i] = theta^(-2i / dim)` for `i < dim / 2`. Llama 3.1 scaling
//! (`_compute_llama3_parameters`), with `wavelen = 2 pi / inv_freq`,
//! `low_wl = original_max_position / low_freq_factor` and
//! `high_wl = original_max_position / high_freq_factor`:
//!
//! ```text
//!   wavelen < high_wl           -> inv_freq                       (high frequencies kept)
//!   wavelen > low_wl            -> inv_freq / factor              (low frequencies scaled)
//!   otherwise, with s = (original_max_position / wavelen - low_freq_factor)
//!                       / (high_freq_factor - low_freq_factor):
//!                               -> (1 - s) * inv_freq / factor + s * inv_freq
//! ```
//!
//! YaRN (`_compute_yarn_parameters`): with `d(r) = dim ln(orig / (2 pi r)) / (2 ln theta)`,
//! `low = max(floor(d(beta_fast)), 0)`, `high = min(ceil(d(beta_slow)), dim - 1)` (no
//! rounding without `truncate`), `ramp_i = clamp((i - low) / (high - low), 0, 1)`:
//! `inv_freq_i = base_i / factor * ramp_i + base_i * (1 - ramp_i)`.
//!
//! Dynamic NTK (`_compute_dynamic_ntk_parameters`), for a sequence of `n` tokens
//! (`n = max(n, orig)`): `theta' = theta * (factor n / orig - (factor - 1))^(dim / (dim - 2))`.
//! transformers recomputes this whenever a sequence grows past the longest one seen (and
//! resets it below `orig`), which re-rotates keys already cached under another base. Kestrel
//! evaluates it once, at `n = rope_context_length` (default `max_position_embeddings`, which
//! for a dynamic model is its original length): within the original length that is the
//! unscaled base, exactly transformers' values; set longer, it is the base transformers would
//! use for a sequence of that length (vLLM's choice with `max_position * factor`), the same
//! for every position, so cached keys stay valid.
//!
//! LongRoPE (`_compute_longrope_parameters`): `inv_freq_i = base_i / ext_i`, `ext` the long
//! factors for sequences longer than `orig` and the short ones otherwise. transformers picks
//! per forward pass by the current length; Kestrel picks once, long when
//! `rope_context_length > orig` (llama.cpp's rule with its context size), so a model served
//! past its original length uses the long factors from the first token.
//!
//! Everything is computed in `f64` and rounded to `f32` once at the end.

use std::f64::consts::PI;

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

    /// The `rotary_dim / 2` rotary inverse frequencies, with `rope_scaling` applied.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        let dim = self.rotary_dim;
        let theta = f64::from(self.rope_theta);
        let scaled: Vec<f64> = match &self.rope_scaling {
            None => base_freqs(theta, dim).collect(),
            Some(RopeScaling::Linear { factor }) => base_freqs(theta, dim)
                .map(|f| f / f64::from(*factor))
                .collect(),
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
                base_freqs(theta, dim).map(|f| p.apply(f)).collect()
            }
            Some(RopeScaling::FreqFactors { factors }) => base_freqs(theta, dim)
                .zip(factors)
                .map(|(f, &k)| f / f64::from(k))
                .collect(),
            Some(RopeScaling::Yarn {
                factor,
                original_max_position,
                beta_fast,
                beta_slow,
                truncate,
                ..
            }) => {
                let ramp = YarnRamp::new(
                    [f64::from(*beta_fast), f64::from(*beta_slow)],
                    dim,
                    theta,
                    *original_max_position as f64,
                    *truncate,
                );
                let factor = f64::from(*factor);
                base_freqs(theta, dim)
                    .enumerate()
                    .map(|(i, f)| {
                        let extrapolate = 1.0 - ramp.at(i);
                        f / factor * (1.0 - extrapolate) + f * extrapolate
                    })
                    .collect()
            }
            Some(RopeScaling::DynamicNtk {
                factor,
                original_max_position,
            }) => {
                let orig = *original_max_position as f64;
                let n = (self.rope_context_length as f64).max(orig);
                let factor = f64::from(*factor);
                let d = dim as f64;
                let theta = theta * (factor * n / orig - (factor - 1.0)).powf(d / (d - 2.0));
                base_freqs(theta, dim).collect()
            }
            Some(RopeScaling::LongRope {
                short_factor,
                long_factor,
                original_max_position,
                ..
            }) => {
                let ext = match self.rope_context_length > *original_max_position {
                    true => long_factor,
                    false => short_factor,
                };
                base_freqs(theta, dim)
                    .zip(ext)
                    .map(|(f, &k)| f / f64::from(k))
                    .collect()
            }
        };
        scaled.into_iter().map(|f| f as f32).collect()
    }

    /// The factor on cos and sin (so on queries and keys): YaRN's and LongRoPE's attention
    /// factor, 1 for every other scaling.
    pub fn rope_attention_factor(&self) -> f32 {
        match &self.rope_scaling {
            Some(RopeScaling::Yarn {
                attention_factor, ..
            })
            | Some(RopeScaling::LongRope {
                attention_factor, ..
            }) => *attention_factor,
            _ => 1.0,
        }
    }
}

/// `theta^(-2i / dim)` for `i < dim / 2`.
fn base_freqs(theta: f64, dim: usize) -> impl Iterator<Item = f64> {
    (0..dim / 2).map(move |i| 1.0 / theta.powf((2 * i) as f64 / dim as f64))
}

/// YaRN's default attention factor for `factor` and an `mscale`: `0.1 mscale ln(factor) + 1`
/// (1 when `factor <= 1`).
pub(crate) fn yarn_mscale(factor: f64, mscale: f64) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * mscale * factor.ln() + 1.0
    }
}

/// LongRoPE's default attention factor: `sqrt(1 + ln(factor) / ln(orig))` (1 when
/// `factor <= 1`), `factor` being `max_position_embeddings / orig` unless given.
pub(crate) fn longrope_attention(factor: f64, orig: usize) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        (1.0 + factor.ln() / (orig as f64).ln()).sqrt()
    }
}

/// YaRN's linear ramp over the pair index, between the correction dimensions.
struct YarnRamp {
    low: f64,
    high: f64,
}

impl YarnRamp {
    fn new(betas: [f64; 2], dim: usize, theta: f64, orig: f64, truncate: bool) -> YarnRamp {
        let d = dim as f64;
        let correction =
            |rotations: f64| d * (orig / (rotations * 2.0 * PI)).ln() / (2.0 * theta.ln());
        let (mut low, mut high) = (correction(betas[0]), correction(betas[1]));
        if truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
        if low == high {
            high += 0.001; // as transformers: no division by zero
        }
        YarnRamp { low, high }
    }

    fn at(&self, i: usize) -> f64 {
        ((i as f64 - self.low) / (self.high - self.low)).clamp(0.0, 1.0)
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
        let wavelen = 2.0 * PI / inv_freq;
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

/// Check scaling parameters against the rotary dimensions.
pub(super) fn validate_scaling(
    scaling: &RopeScaling,
    rotary_dim: usize,
) -> Result<(), ConfigError> {
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
            nonzero_original(*original_max_position)
        }
        RopeScaling::FreqFactors { factors } => {
            check_factors("rope frequency factors", factors, rotary_dim)
        }
        RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            attention_factor,
            ..
        } => {
            positive("rope_scaling.factor", *factor)?;
            positive("rope_scaling.beta_fast", *beta_fast)?;
            positive("rope_scaling.beta_slow", *beta_slow)?;
            positive("rope_scaling.attention_factor", *attention_factor)?;
            nonzero_original(*original_max_position)
        }
        RopeScaling::DynamicNtk {
            factor,
            original_max_position,
        } => {
            positive("rope_scaling.factor", *factor)?;
            if rotary_dim <= 2 {
                return Err(ConfigError::Invalid(format!(
                    "dynamic rope scaling needs more than 2 rotary dimensions, got {rotary_dim}"
                )));
            }
            nonzero_original(*original_max_position)
        }
        RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position,
            attention_factor,
        } => {
            check_factors("rope_scaling.short_factor", short_factor, rotary_dim)?;
            check_factors("rope_scaling.long_factor", long_factor, rotary_dim)?;
            positive("rope_scaling.attention_factor", *attention_factor)?;
            nonzero_original(*original_max_position)
        }
    }
}

fn nonzero_original(original_max_position: usize) -> Result<(), ConfigError> {
    if original_max_position == 0 {
        return Err(ConfigError::Invalid(
            "rope_scaling.original_max_position_embeddings is 0".into(),
        ));
    }
    Ok(())
}

/// One positive factor per rotary pair.
fn check_factors(what: &str, factors: &[f32], rotary_dim: usize) -> Result<(), ConfigError> {
    if factors.len() != rotary_dim / 2 {
        return Err(ConfigError::Invalid(format!(
            "{} {what} for {rotary_dim} rotary dimensions (expected {})",
            factors.len(),
            rotary_dim / 2
        )));
    }
    factors.iter().try_for_each(|&k| positive(what, k))
}
