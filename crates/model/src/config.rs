//! [`ModelConfig`]: the hyper-parameters of a decoder-only transformer, read from GGUF
//! metadata ([`ModelConfig::from_gguf`]) or a Hugging Face `config.json`
//! ([`ModelConfig::from_hf_json`], both the older and the transformers-5 key styles), and
//! validated in one place ([`ModelConfig::validate`]). [`ModelConfig::rope_inv_freq`] gives
//! the rotary inverse frequencies, scaling included.

use crate::weights::gguf::GgufError;

mod from_gguf;
mod from_hf;
mod rope;

/// The architectures Kestrel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Architecture {
    Llama,
    Mistral,
    Qwen2,
}

impl Architecture {
    /// From a GGUF `general.architecture` or HF `model_type` name.
    pub fn from_name(name: &str) -> Option<Architecture> {
        match name {
            "llama" => Some(Architecture::Llama),
            "mistral" => Some(Architecture::Mistral),
            "qwen2" => Some(Architecture::Qwen2),
            _ => None,
        }
    }

    /// From an HF `architectures` entry such as `LlamaForCausalLM`.
    pub fn from_hf_class(class: &str) -> Option<Architecture> {
        match class {
            "LlamaForCausalLM" => Some(Architecture::Llama),
            "MistralForCausalLM" => Some(Architecture::Mistral),
            "Qwen2ForCausalLM" => Some(Architecture::Qwen2),
            _ => None,
        }
    }

    /// The lower-case name (`llama`, `mistral`, `qwen2`).
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
        }
    }
}

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
}

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
    pub intermediate_size: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: usize,
    /// The LM head reuses the token embedding matrix.
    pub tie_word_embeddings: bool,
    /// Every layer attends to at most this many previous positions.
    pub sliding_window: Option<usize>,
    /// The q/k/v projections have biases (Qwen2).
    pub attention_bias: bool,
    pub bos_token_id: Option<u32>,
    /// End-of-sequence ids (HF configs may list several; GGUF gives eos and, if set, eot).
    pub eos_token_ids: Vec<u32>,
    /// The checkpoint's stored dtype (`torch_dtype` / `dtype`), if the source says.
    pub dtype: Option<String>,
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
    #[error("unsupported architecture {0:?} (Kestrel runs llama, mistral, qwen2)")]
    UnsupportedArchitecture(String),
    #[error("unsupported rope scaling {0:?} (Kestrel supports linear and llama3)")]
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
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid(format!("{name} is 0")));
        }
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
        positive("rms_norm_eps", self.rms_norm_eps)?;
        positive("rope_theta", self.rope_theta)?;
        if self.sliding_window == Some(0) {
            return Err(ConfigError::Invalid("sliding_window is 0".to_string()));
        }
        if let Some(scaling) = &self.rope_scaling {
            rope::validate_scaling(scaling, self.head_dim)?;
        }
        Ok(())
    }

    /// Number of query heads sharing one key/value head.
    pub fn group_size(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }
}

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
