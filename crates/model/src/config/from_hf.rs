//! [`ModelConfig::from_hf_json`]: a Hugging Face `config.json`, in either key style:
//!
//! * older: top-level `rope_theta`, `rope_scaling: {type|rope_type, factor, ...}`, `torch_dtype`;
//! * transformers 5: `rope_parameters: {rope_theta, rope_type, factor, ...}`, `dtype`.
//!
//! Absent optional keys take the transformers defaults of the family's config class
//! ([`crate::families`] holds each family's keys and defaults).
//! RoPE scaling (`linear`, `llama3`, `yarn`, `dynamic`, `longrope`/`su`) and
//! `partial_rotary_factor` (top level or in the rope parameters) are read as transformers'
//! `standardize_rope_params` does: a top-level `original_max_position_embeddings` (Phi-3) wins
//! over the rope parameters' own, which default to `max_position_embeddings`.

use serde_json::{Map, Value};

use super::gemma::{gemma_from_hf, gemma_window_from_hf};
use super::rope::{longrope_attention, yarn_mscale};
use super::window::layer_types;
use super::{Architecture, ConfigError, ModelConfig, RopeScaling};

/// A JSON object of `config.json`.
pub(crate) type Obj = Map<String, Value>;

impl ModelConfig {
    /// Parse and validate a `config.json`.
    pub fn from_hf_json(text: &str) -> Result<ModelConfig, ConfigError> {
        let json: Value = serde_json::from_str(text)?;
        let obj = json
            .as_object()
            .ok_or_else(|| bad("(root)", "not a JSON object"))?;
        hf_architecture(obj)?.config_from_hf(obj)
    }
}

/// The configuration of a Llama-style decoder of family `arch`: the keys every such family
/// shares, and the family's own (defaults, window, biases, Gemma and MoE parts) from its
/// `Family` hooks.
pub(crate) fn decoder_config(arch: Architecture, obj: &Obj) -> Result<ModelConfig, ConfigError> {
    let family = arch.family();
    let defaults = family.hf_defaults();
    let n_heads = req_usize(obj, "num_attention_heads")?;
    let hidden_size = req_usize(obj, "hidden_size")?;
    let rope_params = rope_params(obj)?;
    let n_layers = req_usize(obj, "num_hidden_layers")?;
    let n_layers = super::layer_count("num_hidden_layers", n_layers as u64)?;
    let window = match family.gemma() {
        Some(traits) => gemma_window_from_hf(obj, traits, n_layers, layer_types(obj)?)?,
        None => family.hf_window(obj, n_layers)?,
    };
    let head_dim =
        opt_usize(obj, "head_dim")?.unwrap_or_else(|| default_head_dim(hidden_size, n_heads));
    let max_position_embeddings =
        opt_usize(obj, "max_position_embeddings")?.unwrap_or(defaults.max_positions);
    let rope_theta = rope_theta(obj, rope_params, defaults.rope_theta)?;
    let gemma = family
        .gemma()
        .map(|traits| gemma_from_hf(obj, traits, head_dim, rope_theta))
        .transpose()?;
    let rope = RopeContext {
        top: obj,
        yarn_is_longrope: family.hf_yarn_is_longrope(),
        max_positions: max_position_embeddings,
    };
    let config = ModelConfig {
        architecture: arch,
        vocab_size: req_usize(obj, "vocab_size")?,
        hidden_size,
        n_layers,
        n_heads,
        n_kv_heads: opt_usize(obj, "num_key_value_heads")?.unwrap_or(n_heads),
        head_dim,
        rotary_dim: rotary_dim(obj, rope_params, head_dim)?,
        intermediate_size: req_usize(obj, "intermediate_size")?,
        rms_norm_eps: opt_f32(obj, "rms_norm_eps")?.unwrap_or(defaults.rms_norm_eps),
        rope_theta,
        rope_scaling: rope_params.map(|p| rope.scaling(p)).transpose()?.flatten(),
        max_position_embeddings,
        rope_context_length: max_position_embeddings,
        tie_word_embeddings: opt_bool(obj, "tie_word_embeddings")?
            .unwrap_or(defaults.tie_word_embeddings),
        sliding_window: window.size,
        window_layers: window.layers,
        attention_bias: family.hf_attention_bias(obj)?,
        qk_norm: arch.has_qk_norm(),
        bos_token_id: opt_u32(obj, "bos_token_id")?,
        eos_token_ids: eos_ids(obj)?,
        dtype: opt_str(obj, "dtype")?
            .or(opt_str(obj, "torch_dtype")?)
            .map(str::to_string),
        moe: family.hf_moe(obj, n_layers)?,
        gemma,
        mla: None,
    };
    if !hidden_size.is_multiple_of(n_heads) && opt_usize(obj, "head_dim")?.is_none() {
        return Err(ConfigError::Invalid(format!(
            "hidden_size ({hidden_size}) is not a multiple of num_attention_heads ({n_heads}) and head_dim is not given"
        )));
    }
    config.validate()?;
    Ok(config)
}

fn default_head_dim(hidden: usize, n_heads: usize) -> usize {
    hidden.checked_div(n_heads).unwrap_or(0)
}

/// `int(head_dim * partial_rotary_factor)`, the factor from the rope parameters or the top
/// level (default 1).
fn rotary_dim(obj: &Obj, params: Option<&Obj>, head_dim: usize) -> Result<usize, ConfigError> {
    let in_params = params
        .map(|p| opt_f64(p, "partial_rotary_factor"))
        .transpose()?;
    let factor = match in_params.flatten() {
        Some(f) => f,
        None => opt_f64(obj, "partial_rotary_factor")?.unwrap_or(1.0),
    };
    if !(factor > 0.0 && factor <= 1.0) {
        return Err(bad(
            "partial_rotary_factor",
            &format!("must be in (0, 1], got {factor}"),
        ));
    }
    Ok((head_dim as f64 * factor) as usize)
}

/// The family a `config.json` names: `model_type`, else the first `architectures` class.
fn hf_architecture(obj: &Obj) -> Result<Architecture, ConfigError> {
    if let Some(model_type) = opt_str(obj, "model_type")? {
        return crate::families::registry::by_hf_model_type(model_type);
    }
    let classes = obj.get("architectures").and_then(Value::as_array);
    let first = classes.and_then(|c| c.first()).and_then(Value::as_str);
    match first {
        Some(class) => crate::families::by_hf_class(class)
            .ok_or_else(|| ConfigError::UnsupportedArchitecture(class.to_string())),
        None => Err(ConfigError::MissingField("model_type".to_string())),
    }
}

/// `rope_parameters` (transformers 5) or `rope_scaling` (older); `None` when absent or null.
/// Per-layer-type parameters (Gemma 3) give the global (`full_attention`) layers' entry.
pub(crate) fn rope_params(obj: &Obj) -> Result<Option<&Obj>, ConfigError> {
    for key in ["rope_parameters", "rope_scaling"] {
        match obj.get(key) {
            None | Some(Value::Null) => continue,
            Some(Value::Object(m)) => match m.get("full_attention") {
                Some(Value::Object(full)) => return Ok(Some(full)),
                _ => return Ok(Some(m)),
            },
            Some(_) => return Err(bad(key, "expected an object or null")),
        }
    }
    Ok(None)
}

/// The rope parameters' `rope_theta`, else the top-level one, else the family's `default`.
fn rope_theta(obj: &Obj, params: Option<&Obj>, default: f32) -> Result<f32, ConfigError> {
    if let Some(theta) = params
        .map(|p| opt_f32(p, "rope_theta"))
        .transpose()?
        .flatten()
    {
        return Ok(theta);
    }
    Ok(opt_f32(obj, "rope_theta")?.unwrap_or(default))
}

/// What reading a rope parameter object needs from the rest of the config.
struct RopeContext<'a> {
    top: &'a Obj,
    /// The family's config class reads `yarn` as LongRoPE.
    yarn_is_longrope: bool,
    max_positions: usize,
}

impl RopeContext<'_> {
    /// The scaling described by a rope parameter object; `None` for the default type.
    fn scaling(&self, p: &Obj) -> Result<Option<RopeScaling>, ConfigError> {
        let kind = match opt_str(p, "rope_type")? {
            Some(k) => Some(k),
            None => opt_str(p, "type")?,
        };
        let factor = |p: &Obj| opt_f32(p, "factor")?.ok_or_else(|| missing("rope_scaling.factor"));
        match kind.unwrap_or("default") {
            "default" => Ok(None),
            "linear" => Ok(Some(RopeScaling::Linear { factor: factor(p)? })),
            "llama3" => Ok(Some(RopeScaling::Llama3 {
                factor: factor(p)?,
                low_freq_factor: opt_f32(p, "low_freq_factor")?
                    .ok_or_else(|| missing("rope_scaling.low_freq_factor"))?,
                high_freq_factor: opt_f32(p, "high_freq_factor")?
                    .ok_or_else(|| missing("rope_scaling.high_freq_factor"))?,
                original_max_position: opt_usize(p, "original_max_position_embeddings")?
                    .ok_or_else(|| missing("rope_scaling.original_max_position_embeddings"))?,
            })),
            "yarn" if self.yarn_is_longrope => self.longrope(p).map(Some),
            "yarn" => self.yarn(p).map(Some),
            "dynamic" => Ok(Some(RopeScaling::DynamicNtk {
                factor: factor(p)?,
                original_max_position: self.max_positions,
            })),
            "longrope" | "su" => self.longrope(p).map(Some),
            other => Err(ConfigError::UnsupportedRopeScaling(other.to_string())),
        }
    }

    /// A top-level `original_max_position_embeddings` first (transformers gives it priority),
    /// then the parameters', then `max_position_embeddings`.
    fn original_max_position(&self, p: &Obj) -> Result<usize, ConfigError> {
        let top = opt_usize(self.top, "original_max_position_embeddings")?;
        let own = opt_usize(p, "original_max_position_embeddings")?;
        Ok(top.or(own).unwrap_or(self.max_positions))
    }

    /// `factor`, or `max_position_embeddings / original` when absent.
    fn factor_or_ratio(&self, p: &Obj, orig: usize) -> Result<f64, ConfigError> {
        Ok(opt_f64(p, "factor")?.unwrap_or(self.max_positions as f64 / orig as f64))
    }

    fn yarn(&self, p: &Obj) -> Result<RopeScaling, ConfigError> {
        let orig = self.original_max_position(p)?;
        let factor = self.factor_or_ratio(p, orig)?;
        let attention = match opt_f64(p, "attention_factor")? {
            Some(a) => a,
            None => {
                let mscale = opt_f64(p, "mscale")?.filter(|&m| m != 0.0);
                let all_dim = opt_f64(p, "mscale_all_dim")?.filter(|&m| m != 0.0);
                match (mscale, all_dim) {
                    (Some(m), Some(a)) => yarn_mscale(factor, m) / yarn_mscale(factor, a),
                    _ => yarn_mscale(factor, 1.0),
                }
            }
        };
        // `beta_fast or 32`, `beta_slow or 1`: 0 and null take the default too.
        let beta = |key: &str, default: f32| -> Result<f32, ConfigError> {
            Ok(opt_f32(p, key)?.filter(|&b| b != 0.0).unwrap_or(default))
        };
        Ok(RopeScaling::Yarn {
            factor: factor as f32,
            original_max_position: orig,
            beta_fast: beta("beta_fast", 32.0)?,
            beta_slow: beta("beta_slow", 1.0)?,
            truncate: opt_bool(p, "truncate")?.unwrap_or(true),
            attention_factor: attention as f32,
        })
    }

    fn longrope(&self, p: &Obj) -> Result<RopeScaling, ConfigError> {
        let orig = self.original_max_position(p)?;
        let attention = match opt_f64(p, "attention_factor")? {
            Some(a) => a,
            None => longrope_attention(self.factor_or_ratio(p, orig)?, orig),
        };
        Ok(RopeScaling::LongRope {
            short_factor: f32_list(p, "short_factor")?,
            long_factor: f32_list(p, "long_factor")?,
            original_max_position: orig,
            attention_factor: attention as f32,
        })
    }
}

/// A required list of numbers.
fn f32_list(obj: &Obj, key: &str) -> Result<Vec<f32>, ConfigError> {
    let field = format!("rope_scaling.{key}");
    let items = present(obj, key)
        .ok_or_else(|| missing(&field))?
        .as_array()
        .ok_or_else(|| bad(&field, "expected a list of numbers"))?;
    items
        .iter()
        .map(|v| {
            v.as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| bad(&field, &format!("expected a number, got {v}")))
        })
        .collect()
}

/// `eos_token_id`: an integer, a list of integers, or null.
pub(crate) fn eos_ids(obj: &Obj) -> Result<Vec<u32>, ConfigError> {
    match obj.get("eos_token_id") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(|v| as_u32(v, "eos_token_id")).collect(),
        Some(v) => Ok(vec![as_u32(v, "eos_token_id")?]),
    }
}

pub(crate) fn bad(field: &str, reason: &str) -> ConfigError {
    ConfigError::BadField {
        field: field.to_string(),
        reason: reason.to_string(),
    }
}

pub(crate) fn missing(field: &str) -> ConfigError {
    ConfigError::MissingField(field.to_string())
}

/// The value under `key`, treating JSON null as absent.
pub(crate) fn present<'a>(obj: &'a Obj, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(crate) fn opt_usize(obj: &Obj, key: &str) -> Result<Option<usize>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| bad(key, &format!("expected a non-negative integer, got {v}")))
        })
        .transpose()
}

pub(crate) fn req_usize(obj: &Obj, key: &str) -> Result<usize, ConfigError> {
    opt_usize(obj, key)?.ok_or_else(|| missing(key))
}

fn as_u32(v: &Value, key: &str) -> Result<u32, ConfigError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad(key, &format!("expected a token id, got {v}")))
}

pub(crate) fn opt_u32(obj: &Obj, key: &str) -> Result<Option<u32>, ConfigError> {
    present(obj, key).map(|v| as_u32(v, key)).transpose()
}

pub(crate) fn opt_f32(obj: &Obj, key: &str) -> Result<Option<f32>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| bad(key, &format!("expected a number, got {v}")))
        })
        .transpose()
}

pub(crate) fn opt_f64(obj: &Obj, key: &str) -> Result<Option<f64>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_f64()
                .ok_or_else(|| bad(key, &format!("expected a number, got {v}")))
        })
        .transpose()
}

pub(crate) fn opt_bool(obj: &Obj, key: &str) -> Result<Option<bool>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_bool()
                .ok_or_else(|| bad(key, &format!("expected true or false, got {v}")))
        })
        .transpose()
}

pub(crate) fn opt_str<'a>(obj: &'a Obj, key: &str) -> Result<Option<&'a str>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_str()
                .ok_or_else(|| bad(key, &format!("expected a string, got {v}")))
        })
        .transpose()
}
