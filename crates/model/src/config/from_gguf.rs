//! [`ModelConfig::from_gguf`]: hyper-parameters from GGUF metadata (`{arch}.*` keys, as
//! llama.cpp writes them), cross-checked against the token embedding tensor.

use crate::weights::gguf::{GgufFile, MetaArray, OptionalKey};

use super::gemma::{gemma_from_gguf, gguf_swa_flags, GgufDims};
use super::rope::yarn_mscale;
use super::{Architecture, ConfigError, ModelConfig, MoeConfig, NormKind, RopeScaling};

/// llama.cpp's per-frequency rope divisors (Llama 3.1 GGUFs).
const ROPE_FREQS_TENSOR: &str = "rope_freqs.weight";
/// LongRoPE's per-frequency divisors past / within the original context (Phi-3 GGUFs).
const ROPE_FACTORS_LONG: &str = "rope_factors_long.weight";
const ROPE_FACTORS_SHORT: &str = "rope_factors_short.weight";

impl ModelConfig {
    /// Read and validate the configuration stored in `file`'s metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<ModelConfig, ConfigError> {
        let arch_name = file.get_str("general.architecture")?;
        let architecture = crate::families::by_name(arch_name)
            .ok_or_else(|| ConfigError::UnsupportedArchitecture(arch_name.to_string()))?;
        let block_count = format!("{arch_name}.block_count");
        let n_layers = match file.get_u64(&block_count).optional()? {
            Some(n) => super::layer_count(&block_count, n)?,
            None => 0,
        };
        let moe = MoeConfig::from_gguf(file, arch_name, architecture, n_layers)?;
        let architecture = match (architecture.family().with_experts(), &moe) {
            (Some(sparse), Some(_)) => sparse,
            _ => architecture,
        };
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
        let max_position_embeddings = required("context_length")?;
        let rope_theta = file
            .get_f32(&key("rope.freq_base"))
            .optional()?
            .unwrap_or(10000.0);
        let family = architecture.family();
        let mut sliding_window = family.gguf_window(usize_key("attention.sliding_window")?);
        let mut window_layers = match (family.gguf_window_pattern(), sliding_window) {
            (Some(period), Some(_)) => {
                let key = key("attention.sliding_window_pattern");
                Some(gguf_swa_flags(file, &key, period, n_layers)?)
            }
            _ => None,
        };
        let dims = GgufDims {
            n_layers,
            hidden: hidden_size,
            n_heads,
            head_dim,
            rope_theta,
        };
        let gemma = match family.gemma() {
            None => None,
            Some(traits) => {
                let (gemma, window) = gemma_from_gguf(file, arch_name, traits, dims)?;
                (sliding_window, window_layers) = (window.size, window.layers);
                Some(gemma)
            }
        };
        let mut config = ModelConfig {
            architecture,
            vocab_size: gguf_vocab_size(file, arch_name)?,
            hidden_size,
            n_layers,
            n_heads,
            n_kv_heads: usize_key("attention.head_count_kv")?.unwrap_or(n_heads),
            head_dim,
            rotary_dim: usize_key("rope.dimension_count")?.unwrap_or(head_dim),
            intermediate_size: required("feed_forward_length")?,
            rms_norm_eps: file.get_f32(&key(norm_eps_key(architecture)))?,
            rope_theta,
            rope_scaling: gguf_rope_scaling(file, arch_name, family.gguf_yarn_truncate())?,
            max_position_embeddings,
            rope_context_length: max_position_embeddings,
            tie_word_embeddings: file.tensor_info("output.weight").is_none(),
            sliding_window,
            window_layers,
            attention_bias: file.tensor_info("blk.0.attn_q.bias").is_some()
                || file.tensor_info("blk.0.attn_qkv.bias").is_some(),
            qk_norm: architecture.has_qk_norm(),
            bos_token_id: file.get_u32("tokenizer.ggml.bos_token_id").optional()?,
            eos_token_ids: gguf_eos_ids(file, family.gguf_end_tokens())?,
            dtype: None,
            moe,
            gemma,
            mla: None,
        };
        family.gguf_finish(file, arch_name, &mut config)?;
        config.validate()?;
        check_embedding_shape(file, &config)?;
        Ok(config)
    }
}

/// The metadata key (after `{arch}.`) of the norm epsilon: LayerNorm or RMSNorm.
fn norm_eps_key(arch: Architecture) -> &'static str {
    match arch.layout().norm {
        NormKind::Layer => "attention.layer_norm_epsilon",
        NormKind::Rms => "attention.layer_norm_rms_epsilon",
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

/// `{arch}.rope.scaling.type` / `.factor` (or the older `rope.scale_linear`), YaRN's keys, the
/// `rope_freqs.weight` tensor, or LongRoPE's `rope_factors_{long,short}.weight` tensors.
/// `truncate`: whether a YaRN ramp rounds its ends (the family's rule; GGUF does not say).
fn gguf_rope_scaling(
    file: &GgufFile,
    arch: &str,
    truncate: bool,
) -> Result<Option<RopeScaling>, ConfigError> {
    let kind = file
        .get_str(&format!("{arch}.rope.scaling.type"))
        .optional()?;
    if kind == Some("longrope") || file.tensor_info(ROPE_FACTORS_LONG).is_some() {
        return gguf_longrope(file, arch).map(Some);
    }
    if kind == Some("yarn") {
        return gguf_yarn(file, arch, truncate).map(Some);
    }
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
    if file.tensor_info(ROPE_FREQS_TENSOR).is_none() {
        return Ok(linear);
    }
    if linear.is_some() {
        return Err(ConfigError::Unsupported(format!(
            "linear rope scaling together with {ROPE_FREQS_TENSOR}"
        )));
    }
    Ok(Some(RopeScaling::FreqFactors {
        factors: f32_tensor(file, ROPE_FREQS_TENSOR)?,
    }))
}

/// The values of an F32 tensor.
fn f32_tensor(file: &GgufFile, name: &str) -> Result<Vec<f32>, ConfigError> {
    let info = file
        .tensor_info(name)
        .ok_or_else(|| ConfigError::MissingField(name.to_string()))?;
    if info.dtype != kestrel_kernels::DType::F32 {
        return Err(ConfigError::Unsupported(format!(
            "{name} of type {}",
            info.dtype
        )));
    }
    let data = file
        .tensor_data(info)
        .ok_or_else(|| ConfigError::MissingField(name.to_string()))?;
    Ok(data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn required_f32(file: &GgufFile, key: &str) -> Result<f32, ConfigError> {
    file.get_f32(key)
        .optional()?
        .ok_or_else(|| ConfigError::MissingField(key.to_string()))
}

fn original_context(file: &GgufFile, arch: &str) -> Result<usize, ConfigError> {
    let key = format!("{arch}.rope.scaling.original_context_length");
    let n = file.get_u64(&key).optional()?;
    n.map(|n| n as usize).ok_or(ConfigError::MissingField(key))
}

/// YaRN from `rope.scaling.factor`, `.original_context_length`, `.yarn_beta_fast` /
/// `.yarn_beta_slow` (defaults 32 / 1). The attention factor: `.yarn_attn_factor` when the
/// converter wrote one (transformers' `attention_factor`), else llama.cpp's rule:
/// `mscale(factor, 1) / mscale(factor, yarn_log_multiplier)` when that key is set and non-zero,
/// `0.1 ln(factor) + 1` otherwise; times `rope.scaling.attn_factor` when present.
fn gguf_yarn(file: &GgufFile, arch: &str, truncate: bool) -> Result<RopeScaling, ConfigError> {
    let key = |suffix: &str| format!("{arch}.rope.scaling.{suffix}");
    let opt = |suffix: &str| file.get_f32(&key(suffix)).optional();
    let factor = required_f32(file, &key("factor"))?;
    let f = f64::from(factor);
    let attention = match opt("yarn_attn_factor")? {
        Some(a) => f64::from(a),
        None => match opt("yarn_log_multiplier")?.filter(|&m| m != 0.0) {
            Some(m) => yarn_mscale(f, 1.0) / yarn_mscale(f, f64::from(m)),
            None => yarn_mscale(f, 1.0),
        },
    };
    let extra = f64::from(opt("attn_factor")?.unwrap_or(1.0));
    Ok(RopeScaling::Yarn {
        factor,
        original_max_position: original_context(file, arch)?,
        beta_fast: opt("yarn_beta_fast")?.unwrap_or(32.0),
        beta_slow: opt("yarn_beta_slow")?.unwrap_or(1.0),
        truncate,
        attention_factor: (attention * extra) as f32,
    })
}

/// LongRoPE from the `rope_factors_{long,short}.weight` tensors, `rope.scaling.original_context_length`
/// and `rope.scaling.attn_factor` (which llama.cpp's converter computes; default 1).
fn gguf_longrope(file: &GgufFile, arch: &str) -> Result<RopeScaling, ConfigError> {
    let attention = file
        .get_f32(&format!("{arch}.rope.scaling.attn_factor"))
        .optional()?;
    Ok(RopeScaling::LongRope {
        short_factor: f32_tensor(file, ROPE_FACTORS_SHORT)?,
        long_factor: f32_tensor(file, ROPE_FACTORS_LONG)?,
        original_max_position: original_context(file, arch)?,
        attention_factor: attention.unwrap_or(1.0),
    })
}

/// `tokenizer.ggml.eos_token_id`, then `tokenizer.ggml.eot_token_id` if set and different, then
/// the ids of `end_tokens` (the family's own end-of-generation tokens, which llama.cpp's
/// vocabulary recognises by their text) found in `tokenizer.ggml.tokens`.
fn gguf_eos_ids(file: &GgufFile, end_tokens: &[&str]) -> Result<Vec<u32>, ConfigError> {
    let mut ids = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Some(id) = file.get_u32(key).optional()? {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    if end_tokens.is_empty() {
        return Ok(ids);
    }
    if let Some(MetaArray::String(tokens)) = file.get_array("tokenizer.ggml.tokens").optional()? {
        for (id, t) in tokens.iter().enumerate() {
            if end_tokens.contains(&t.as_str()) && !ids.contains(&(id as u32)) {
                ids.push(id as u32);
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
