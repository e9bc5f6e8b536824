//! [`ModelConfig`]: the hyper-parameters of a decoder-only transformer, read from GGUF
//! metadata ([`ModelConfig::from_gguf`]) or a Hugging Face `config.json`
//! ([`ModelConfig::from_hf_json`], both the older and the transformers-5 key styles), and
//! validated in one place ([`ModelConfig::validate`]). [`ModelConfig::rope_inv_freq`] gives
//! the rotary inverse frequencies, scaling included.

use crate::weights::gguf::GgufError;

mod expert_activation;
mod from_gguf;
pub(crate) mod from_hf;
pub(crate) mod gemma;
mod layout;
mod mla;
pub(crate) mod moe;
pub(crate) mod rope;
pub(crate) mod router_rule;
pub(crate) mod window;

pub use crate::families::Architecture;
pub use expert_activation::ExpertActivation;
pub use gemma::GemmaConfig;
pub use layout::{BlockLayout, MlpKind, NormKind, PositionEncoding};
pub use mla::MlaConfig;
pub use moe::MoeConfig;
pub use router_rule::{ExpertGroups, GroupScore, RouterRule, Scoring};

/// How rotary frequencies are rescaled for longer contexts.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Position interpolation: every inverse frequency divided by `factor`.
    Linear { factor: f32 },
    /// Llama 3.1: low frequencies divided by `factor`, high ones kept, a smooth ramp between.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: usize,
    },
    /// Per-frequency divisors, one per rotary pair (GGUF `rope_freqs.weight`, which llama.cpp
    /// writes instead of the Llama 3.1 parameters).
    FreqFactors { factors: Vec<f32> },
    /// YaRN (HF `rope_type: "yarn"`): frequencies ramp from interpolated (divided by `factor`)
    /// to kept between the dimensions that turn `beta_slow` and `beta_fast` times over the
    /// original context; `attention_factor` multiplies cos and sin (resolved when read, from
    /// `attention_factor` or `mscale` / `mscale_all_dim` or `0.1 ln(factor) + 1`).
    Yarn {
        factor: f32,
        original_max_position: usize,
        beta_fast: f32,
        beta_slow: f32,
        /// Round the ramp's ends outwards to whole dimensions (HF `truncate`, default true).
        truncate: bool,
        attention_factor: f32,
    },
    /// Dynamic NTK (HF `rope_type: "dynamic"`): the base grows with the sequence length past
    /// `original_max_position`. Kestrel evaluates it once, for
    /// [`ModelConfig::rope_context_length`] (see [`ModelConfig::rope_inv_freq`]).
    DynamicNtk {
        factor: f32,
        original_max_position: usize,
    },
    /// LongRoPE (HF `longrope`, formerly `su`; Phi-3 long-context models): per-pair divisors,
    /// `long_factor` past `original_max_position`, `short_factor` within it, chosen once from
    /// [`ModelConfig::rope_context_length`]; `attention_factor` multiplies cos and sin.
    LongRope {
        short_factor: Vec<f32>,
        long_factor: Vec<f32>,
        original_max_position: usize,
        attention_factor: f32,
    },
}

impl RopeScaling {
    /// The scaling's name as Hugging Face configs spell it.
    pub fn kind(&self) -> &'static str {
        match self {
            RopeScaling::Linear { .. } => "linear",
            RopeScaling::Llama3 { .. } => "llama3",
            RopeScaling::FreqFactors { .. } => "frequency factors",
            RopeScaling::Yarn { .. } => "yarn",
            RopeScaling::DynamicNtk { .. } => "dynamic",
            RopeScaling::LongRope { .. } => "longrope",
        }
    }
}

/// The rope scaling types Kestrel reads (for error messages).
pub const SUPPORTED_ROPE_SCALING: &str = "linear, llama3, yarn, dynamic, longrope (su)";

/// Model hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// The leading dimensions of each head that RoPE rotates (`head_dim` unless the model has
    /// partial rotary: HF `partial_rotary_factor`, GGUF `rope.dimension_count`); even.
    pub rotary_dim: usize,
    pub intermediate_size: usize,
    /// The epsilon of the model's norms (RMSNorm; BLOOM's LayerNorm `layer_norm_epsilon`).
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: usize,
    /// The longest sequence the rotary frequencies are set up for (default
    /// `max_position_embeddings`, the longest Kestrel serves). Only LongRoPE (short or long
    /// factors) and dynamic NTK (the base) depend on it: both are fixed once for the model, so
    /// every cached key keeps the rotation it was stored with.
    pub rope_context_length: usize,
    /// The LM head reuses the token embedding matrix.
    pub tie_word_embeddings: bool,
    /// Sliding-window attention: a query at position `p` sees keys `p - w + 1 ..= p` (the
    /// window counts the query itself), in the layers `window_layers` selects.
    pub sliding_window: Option<usize>,
    /// Which layers use `sliding_window`, one flag per layer; `None`: every layer. (Qwen2/3
    /// with `max_window_layers`: full attention below it, the window from it on.)
    pub window_layers: Option<Vec<bool>>,
    /// The q/k/v projections have biases (Qwen2).
    pub attention_bias: bool,
    /// Queries and keys go through a per-head RMSNorm (`head_dim` weights) before RoPE (Qwen3).
    pub qk_norm: bool,
    pub bos_token_id: Option<u32>,
    /// End-of-sequence ids (HF configs may list several; GGUF gives eos and, if set, eot).
    pub eos_token_ids: Vec<u32>,
    /// The checkpoint's stored dtype (`torch_dtype` / `dtype`), if the source says.
    pub dtype: Option<String>,
    /// The sparse mixture-of-experts MLP (Mixtral, Qwen2-MoE, Qwen3-MoE); `None`: every layer
    /// has a dense MLP.
    pub moe: Option<MoeConfig>,
    /// Gemma 2/3 features (`None` for the other families).
    pub gemma: Option<GemmaConfig>,
    /// Multi-head latent attention (DeepSeek V2/V3; `None` for the other families).
    pub mla: Option<MlaConfig>,
}

/// Why a configuration could not be read or is not usable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("config.json is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config is missing {0:?}")]
    MissingField(String),
    #[error("config field {field:?}: {reason}")]
    BadField { field: String, reason: String },
    #[error("unsupported architecture {0:?} (Kestrel runs {list})", list = crate::families::supported_names())]
    UnsupportedArchitecture(String),
    #[error("unsupported rope scaling {0:?} (Kestrel supports {SUPPORTED_ROPE_SCALING})")]
    UnsupportedRopeScaling(String),
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    #[error("tensor {name:?} has ggml dims {found:?}, the config implies {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("invalid config: {0}")]
    Invalid(String),
}

impl ModelConfig {
    /// Check the invariants the model code relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        layer_count("n_layers", self.n_layers as u64)?;
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("rope_context_length", self.rope_context_length),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid(format!("{name} is 0")));
        }
        self.check_products()?;
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(ConfigError::Invalid(format!(
                "n_heads ({}) is not a multiple of n_kv_heads ({})",
                self.n_heads, self.n_kv_heads
            )));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(ConfigError::Invalid(format!(
                "head_dim ({}) is odd; rotary needs pairs",
                self.head_dim
            )));
        }
        if !self.rotary_dim.is_multiple_of(2)
            || self.rotary_dim == 0
            || self.rotary_dim > self.head_dim
        {
            return Err(ConfigError::Invalid(format!(
                "rotary dimensions ({}) must be even and within 2..=head_dim ({})",
                self.rotary_dim, self.head_dim
            )));
        }
        positive("rms_norm_eps", self.rms_norm_eps)?;
        positive("rope_theta", self.rope_theta)?;
        if let Some(g) = &self.gemma {
            positive("local rope theta", g.local_rope_theta)?;
            positive("attention scale", g.attention_scale)?;
            for (name, cap) in [
                ("attn softcap", g.attn_softcap),
                ("final softcap", g.final_softcap),
            ] {
                if let Some(c) = cap {
                    positive(name, c)?;
                }
            }
        }
        self.validate_window()?;
        if let Some(moe) = &self.moe {
            moe.validate(self.n_layers)?;
        }
        if let Some(mla) = &self.mla {
            self.validate_mla(mla)?;
        }
        if let Some(scaling) = &self.rope_scaling {
            rope::validate_scaling(scaling, self.rotary_dim)?;
        }
        Ok(())
    }

    /// Number of query heads sharing one key/value head.
    pub fn group_size(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// The attention score scale: `head_dim^-1/2`, or Gemma's or MLA's own.
    pub fn attention_scale(&self) -> f32 {
        if let Some(mla) = &self.mla {
            return mla.softmax_scale;
        }
        match &self.gemma {
            Some(g) => g.attention_scale,
            None => 1.0 / (self.head_dim as f32).sqrt(),
        }
    }

    /// MLA's sizes and the cache geometry they imply (one row of latent + rotary key).
    fn validate_mla(&self, mla: &MlaConfig) -> Result<(), ConfigError> {
        mla.validate()?;
        let geometry = (self.n_kv_heads, self.head_dim, self.rotary_dim);
        let want = (1, mla.cached_dim(), mla.qk_rope_head_dim);
        if geometry != want {
            return Err(ConfigError::Invalid(format!(
                "latent attention caches one row of {} values rotating {}; the config has {} kv heads of {} rotating {}",
                want.1, want.2, geometry.0, geometry.1, geometry.2
            )));
        }
        Ok(())
    }

    /// What the token embeddings are multiplied by (Gemma: `sqrt(hidden_size)` in f32, as
    /// llama.cpp and transformers in f32 do; transformers in bf16 rounds it to bf16 first).
    pub fn embedding_scale(&self) -> Option<f32> {
        self.gemma
            .as_ref()
            .map(|_| (self.hidden_size as f64).sqrt() as f32)
    }

    /// The attention window of layer `layer` (`None`: it attends to every earlier position).
    pub fn layer_window(&self, layer: usize) -> Option<usize> {
        let slides = match &self.window_layers {
            None => true,
            Some(flags) => flags.get(layer).copied().unwrap_or(false),
        };
        self.sliding_window.filter(|_| slides)
    }

    /// The tensor sizes derived from the dimensions must be representable: each product fits
    /// in [`MAX_TENSOR_ELEMENTS`] (so byte sizes cannot overflow either).
    fn check_products(&self) -> Result<(), ConfigError> {
        let products = [
            ("n_heads * head_dim", self.n_heads, self.head_dim),
            ("n_kv_heads * head_dim", self.n_kv_heads, self.head_dim),
            (
                "vocab_size * hidden_size",
                self.vocab_size,
                self.hidden_size,
            ),
            (
                "intermediate_size * hidden_size",
                self.intermediate_size,
                self.hidden_size,
            ),
        ];
        for (name, a, b) in products {
            if a.checked_mul(b).is_none_or(|p| p > MAX_TENSOR_ELEMENTS) {
                return Err(ConfigError::Invalid(format!(
                    "{name} ({a} * {b}) exceeds {MAX_TENSOR_ELEMENTS} elements"
                )));
            }
        }
        Ok(())
    }

    fn validate_window(&self) -> Result<(), ConfigError> {
        if self.sliding_window == Some(0) {
            return Err(ConfigError::Invalid("sliding_window is 0".to_string()));
        }
        match &self.window_layers {
            Some(flags) if flags.len() != self.n_layers => Err(ConfigError::Invalid(format!(
                "{} sliding-window layer flags for {} layers",
                flags.len(),
                self.n_layers
            ))),
            _ => Ok(()),
        }
    }
}

/// Most transformer layers a configuration may declare. Released models have at most a few
/// hundred; a larger count is a corrupt or hostile file, refused when it is read, before
/// anything is allocated per layer.
pub const MAX_LAYERS: usize = 4096;

/// `n`, the layer count read from `field`, if it is at most [`MAX_LAYERS`].
pub(crate) fn layer_count(field: &str, n: u64) -> Result<usize, ConfigError> {
    match usize::try_from(n) {
        Ok(n) if n <= MAX_LAYERS => Ok(n),
        _ => Err(ConfigError::BadField {
            field: field.to_string(),
            reason: format!("{n} layers; at most {MAX_LAYERS} are supported"),
        }),
    }
}

/// Most elements a tensor derived from the configuration may have (2^40: far beyond any real
/// model's matrices, and small enough that byte sizes of any element type fit in `usize`).
pub const MAX_TENSOR_ELEMENTS: usize = 1 << 40;

/// `value` must be finite and > 0.
fn positive(name: &str, value: f32) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::Invalid(format!(
            "{name} must be a positive finite number, got {value}"
        )))
    }
}
