//! [`ModelConfig::from_gguf`]: hyper-parameters from GGUF metadata (`{arch}.*` keys, as
//! llama.cpp writes them), cross-checked against the token embedding tensor.

use crate::weights::gguf::{GgufFile, OptionalKey};

use super::gemma::{gemma_from_gguf, GgufDims};
use super::{Architecture, ConfigError, ModelConfig, RopeScaling};

/// llama.cpp's per-frequency rope divisors (Llama 3.1 GGUFs).
const ROPE_FREQS_TENSOR: &str = "rope_freqs.weight";

impl ModelConfig {
    /// Read and validate the configuration stored in `file`'s metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<ModelConfig, ConfigError> {
        let arch_name = file.get_str("general.architecture")?;
        let architecture = Architecture::from_name(arch_name)
            .ok_or_else(|| ConfigError::UnsupportedArchitecture(arch_name.to_string()))?;
        let key = |suffix: &str| format!("{arch_name}.{suffix}");
        let usize_key = |suffix: &str| -> Result<Option<usize>, ConfigError> {
            Ok(file.get_u64(&key(suffix)).optional()?.map(|v| v as usize))
        };
        let required = |suffix: &str| -> Result<usize, ConfigError> {
            usize_key(suffix)?.ok_or_else(|| ConfigError::MissingField(key(suffix)))
        };
        let hidden_size = required("embedding_length")?;
        let n_heads = required("attention.head_count")?;
        let head_dim = match usize_key("attention.key_length")? {
            Some(d) => d,
            None => hidden_size.checked_div(n_heads).unwrap_or(0),
        };
        if let Some(rope_dim) = usize_key("rope.dimension_count")? {
            if rope_dim != head_dim {
                return Err(ConfigError::Unsupported(format!(
                    "partial rotary embedding: rope.dimension_count {rope_dim} != head_dim {head_dim}"
                )));
            }
        }
        let n_layers = required("block_count")?;
        let rope_theta = file
            .get_f32(&key("rope.freq_base"))
            .optional()?
            .unwrap_or(10000.0);
        let mut sliding_window = usize_key("attention.sliding_window")?;
        let mut window_layers = None;
        let gemma = match architecture.is_gemma() {
            false => None,
            true => {
                let dims = GgufDims {
                    n_layers,
                    hidden: hidden_size,
                    n_heads,
                    head_dim,
                    rope_theta,
                };
                let (gemma, window) = gemma_from_gguf(file, architecture, dims)?;
                (sliding_window, window_layers) = (window.size, window.layers);
                Some(gemma)
            }
        };
        let config = ModelConfig {
            architecture,
            vocab_size: gguf_vocab_size(file, arch_name)?,
            hidden_size,
            n_layers,
            n_heads,
            n_kv_heads: usize_key("attention.head_count_kv")?.unwrap_or(n_heads),
            head_dim,
            intermediate_size: required("feed_forward_length")?,
            rms_norm_eps: file.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            rope_theta,
            rope_scaling: gguf_rope_scaling(file, arch_name)?,
            max_position_embeddings: required("context_length")?,
            tie_word_embeddings: file.tensor_info("output.weight").is_none(),
            sliding_window,
            window_layers,
            attention_bias: file.tensor_info("blk.0.attn_q.bias").is_some(),
            qk_norm: matches!(architecture, Architecture::Qwen3 | Architecture::Gemma3),
            bos_token_id: file.get_u32("tokenizer.ggml.bos_token_id").optional()?,
            eos_token_ids: gguf_eos_ids(file)?,
            dtype: None,
            gemma,
        };
        config.validate()?;
        check_embedding_shape(file, &config)?;
        Ok(config)
    }
}

/// `{arch}.vocab_size` if present, else the length of `tokenizer.ggml.tokens` (as llama.cpp).
fn gguf_vocab_size(file: &GgufFile, arch: &str) -> Result<usize, ConfigError> {
    if let Some(n) = file.get_u64(&format!("{arch}.vocab_size")).optional()? {
        return Ok(n as usize);
    }
    match file.get_array("tokenizer.ggml.tokens").optional()? {
        Some(tokens) => Ok(tokens.len()),
        None => Err(ConfigError::MissingField(format!(
            "{arch}.vocab_size or tokenizer.ggml.tokens"
        ))),
    }
}

/// `{arch}.rope.scaling.type` / `.factor` (or the older `rope.scale_linear`), or the
/// `rope_freqs.weight` tensor.
fn gguf_rope_scaling(file: &GgufFile, arch: &str) -> Result<Option<RopeScaling>, ConfigError> {
    let kind = file
        .get_str(&format!("{arch}.rope.scaling.type"))
        .optional()?;
    let factor = file
        .get_f32(&format!("{arch}.rope.scaling.factor"))
        .optional()?;
    let old_linear = file
        .get_f32(&format!("{arch}.rope.scale_linear"))
        .optional()?;
    let linear = match (kind, factor.or(old_linear)) {
        (Some("none"), _) | (None, None) => None,
        (Some("linear") | None, Some(1.0)) => None,
        (Some("linear") | None, Some(f)) => Some(RopeScaling::Linear { factor: f }),
        (Some("linear"), None) => {
            return Err(ConfigError::MissingField(format!(
                "{arch}.rope.scaling.factor"
            )))
        }
        (Some(other), _) => return Err(ConfigError::UnsupportedRopeScaling(other.to_string())),
    };
    let Some(info) = file.tensor_info(ROPE_FREQS_TENSOR) else {
        return Ok(linear);
    };
    if linear.is_some() {
        return Err(ConfigError::Unsupported(format!(
            "linear rope scaling together with {ROPE_FREQS_TENSOR}"
        )));
    }
    if info.dtype != kestrel_kernels::DType::F32 {
        return Err(ConfigError::Unsupported(format!(
            "{ROPE_FREQS_TENSOR} of type {}",
            info.dtype
        )));
    }
    let data = file
        .tensor_data(info)
        .ok_or_else(|| ConfigError::MissingField(ROPE_FREQS_TENSOR.to_string()))?;
    let factors = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(Some(RopeScaling::FreqFactors { factors }))
}

/// `tokenizer.ggml.eos_token_id`, then `tokenizer.ggml.eot_token_id` if set and different.
fn gguf_eos_ids(file: &GgufFile) -> Result<Vec<u32>, ConfigError> {
    let mut ids = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Some(id) = file.get_u32(key).optional()? {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

/// `token_embd.weight`, when present, must be `[hidden_size, vocab_size]` in ggml order.
fn check_embedding_shape(file: &GgufFile, config: &ModelConfig) -> Result<(), ConfigError> {
    let Some(info) = file.tensor_info("token_embd.weight") else {
        return Ok(());
    };
    let expected = vec![config.hidden_size as u64, config.vocab_size as u64];
    if info.dims != expected {
        return Err(ConfigError::TensorShape {
            name: info.name.clone(),
            expected,
            found: info.dims.clone(),
        });
    }
    Ok(())
}
