//! [`ModelConfig::from_hf_json`]: a Hugging Face `config.json`, in either key style:
//!
//! * older: top-level `rope_theta`, `rope_scaling: {type|rope_type, factor, ...}`, `torch_dtype`;
//! * transformers 5: `rope_parameters: {rope_theta, rope_type, factor, ...}`, `dtype`.
//!
//! Absent optional keys take the transformers defaults of the architecture's config class.

use serde_json::{Map, Value};

use super::gemma::{gemma_from_hf, gemma_window_from_hf};
use super::{Architecture, ConfigError, ModelConfig, RopeScaling};

type Obj = Map<String, Value>;

impl ModelConfig {
    /// Parse and validate a `config.json`.
    pub fn from_hf_json(text: &str) -> Result<ModelConfig, ConfigError> {
        let json: Value = serde_json::from_str(text)?;
        let obj = json
            .as_object()
            .ok_or_else(|| bad("(root)", "not a JSON object"))?;
        let architecture = hf_architecture(obj)?;
        let n_heads = req_usize(obj, "num_attention_heads")?;
        let hidden_size = req_usize(obj, "hidden_size")?;
        let rope_params = rope_params(obj)?;
        let n_layers = req_usize(obj, "num_hidden_layers")?;
        let window = sliding_window(obj, architecture, n_layers)?;
        let head_dim = opt_usize(obj, "head_dim")?
            .unwrap_or_else(|| default_head_dim(hidden_size, n_heads));
        let rope_theta = rope_theta(obj, rope_params, architecture)?;
        let gemma = match architecture.is_gemma() {
            true => Some(gemma_from_hf(obj, architecture, head_dim, rope_theta)?),
            false => None,
        };
        let config = ModelConfig {
            architecture,
            vocab_size: req_usize(obj, "vocab_size")?,
            hidden_size,
            n_layers,
            n_heads,
            n_kv_heads: opt_usize(obj, "num_key_value_heads")?.unwrap_or(n_heads),
            head_dim,
            intermediate_size: req_usize(obj, "intermediate_size")?,
            rms_norm_eps: opt_f32(obj, "rms_norm_eps")?.unwrap_or(1e-6),
            rope_theta,
            rope_scaling: rope_params.map(rope_scaling).transpose()?.flatten(),
            max_position_embeddings: opt_usize(obj, "max_position_embeddings")?
                .unwrap_or(default_max_positions(architecture)),
            tie_word_embeddings: opt_bool(obj, "tie_word_embeddings")?
                .unwrap_or(architecture.is_gemma()),
            sliding_window: window.size,
            window_layers: window.layers,
            attention_bias: architecture == Architecture::Qwen2
                || opt_bool(obj, "attention_bias")?.unwrap_or(false),
            qk_norm: matches!(architecture, Architecture::Qwen3 | Architecture::Gemma3),
            bos_token_id: opt_u32(obj, "bos_token_id")?,
            eos_token_ids: eos_ids(obj)?,
            dtype: opt_str(obj, "dtype")?
                .or(opt_str(obj, "torch_dtype")?)
                .map(str::to_string),
            gemma,
        };
        if !hidden_size.is_multiple_of(n_heads) && opt_usize(obj, "head_dim")?.is_none() {
            return Err(ConfigError::Invalid(format!(
                "hidden_size ({hidden_size}) is not a multiple of num_attention_heads ({n_heads}) and head_dim is not given"
            )));
        }
        config.validate()?;
        Ok(config)
    }
}

fn default_head_dim(hidden: usize, n_heads: usize) -> usize {
    hidden.checked_div(n_heads).unwrap_or(0)
}

/// transformers' per-class defaults for `max_position_embeddings`.
fn default_max_positions(arch: Architecture) -> usize {
    match arch {
        Architecture::Llama => 2048,
        Architecture::Mistral => 4096 * 32,
        Architecture::Qwen2 | Architecture::Qwen3 => 32768,
        Architecture::Gemma2 => 8192,
        Architecture::Gemma3 => 131_072,
    }
}

fn hf_architecture(obj: &Obj) -> Result<Architecture, ConfigError> {
    if let Some(model_type) = opt_str(obj, "model_type")? {
        match model_type {
            "gemma3_text" => return Ok(Architecture::Gemma3),
            "gemma3" => {
                return Err(ConfigError::Unsupported(
                    "multimodal Gemma 3 (model_type gemma3); Kestrel runs the text-only Gemma3ForCausalLM (gemma3_text)".into(),
                ))
            }
            _ => {}
        }
        return Architecture::from_name(model_type)
            .ok_or_else(|| ConfigError::UnsupportedArchitecture(model_type.to_string()));
    }
    let classes = obj.get("architectures").and_then(Value::as_array);
    let first = classes.and_then(|c| c.first()).and_then(Value::as_str);
    match first {
        Some(class) => Architecture::from_hf_class(class)
            .ok_or_else(|| ConfigError::UnsupportedArchitecture(class.to_string())),
        None => Err(ConfigError::MissingField("model_type".to_string())),
    }
}

/// `rope_parameters` (transformers 5) or `rope_scaling` (older); `None` when absent or null.
/// Per-layer-type parameters (Gemma 3) give the global (`full_attention`) layers' entry.
fn rope_params(obj: &Obj) -> Result<Option<&Obj>, ConfigError> {
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

fn rope_theta(obj: &Obj, params: Option<&Obj>, arch: Architecture) -> Result<f32, ConfigError> {
    if let Some(theta) = params
        .map(|p| opt_f32(p, "rope_theta"))
        .transpose()?
        .flatten()
    {
        return Ok(theta);
    }
    let default = match arch {
        Architecture::Gemma3 => 1_000_000.0,
        _ => 10000.0,
    };
    Ok(opt_f32(obj, "rope_theta")?.unwrap_or(default))
}

/// The scaling described by a rope parameter object; `None` for the default (unscaled) type.
fn rope_scaling(p: &Obj) -> Result<Option<RopeScaling>, ConfigError> {
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
        other => Err(ConfigError::UnsupportedRopeScaling(other.to_string())),
    }
}

/// The sliding window and the layers it applies to.
struct Window {
    size: Option<usize>,
    layers: Option<Vec<bool>>,
}

impl Window {
    const NONE: Window = Window {
        size: None,
        layers: None,
    };
}

/// Mistral: `sliding_window` on every layer (default 4096, null = none). Qwen2/Qwen3 (as
/// transformers' config classes): only with `use_sliding_window`; the layers `layer_types`
/// marks `sliding_attention`, or else layers `max_window_layers..` (default 28).
fn sliding_window(obj: &Obj, arch: Architecture, n_layers: usize) -> Result<Window, ConfigError> {
    match arch {
        Architecture::Llama => Ok(Window::NONE),
        Architecture::Mistral => Ok(Window {
            size: window_size(obj)?,
            layers: None,
        }),
        Architecture::Qwen2 | Architecture::Qwen3 => qwen_window(obj, n_layers),
        Architecture::Gemma2 | Architecture::Gemma3 => {
            let w = gemma_window_from_hf(obj, arch, n_layers, layer_types(obj)?)?;
            Ok(Window {
                size: w.size,
                layers: w.layers,
            })
        }
    }
}

fn qwen_window(obj: &Obj, n_layers: usize) -> Result<Window, ConfigError> {
    if !opt_bool(obj, "use_sliding_window")?.unwrap_or(false) {
        return Ok(Window::NONE);
    }
    let Some(size) = window_size(obj)? else {
        return Ok(Window::NONE);
    };
    let flags = match layer_types(obj)? {
        Some(flags) => flags,
        None => {
            let first = opt_usize(obj, "max_window_layers")?.unwrap_or(28);
            (0..n_layers).map(|i| i >= first).collect()
        }
    };
    let layers = if !flags.contains(&true) {
        return Ok(Window::NONE);
    } else if flags.len() == n_layers && !flags.contains(&false) {
        None
    } else {
        Some(flags) // a wrong length is reported by `validate`
    };
    Ok(Window {
        size: Some(size),
        layers,
    })
}

/// `sliding_window`: absent = 4096 (the transformers default), null = none.
fn window_size(obj: &Obj) -> Result<Option<usize>, ConfigError> {
    match obj.get("sliding_window") {
        None => Ok(Some(4096)),
        Some(_) => opt_usize(obj, "sliding_window"),
    }
}

/// `layer_types` (transformers ≥ 4.53): `true` for each `sliding_attention` layer.
fn layer_types(obj: &Obj) -> Result<Option<Vec<bool>>, ConfigError> {
    let Some(value) = present(obj, "layer_types") else {
        return Ok(None);
    };
    let items = value
        .as_array()
        .ok_or_else(|| bad("layer_types", "expected a list"))?;
    items
        .iter()
        .map(|v| match v.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(bad(
                "layer_types",
                &format!("expected full_attention or sliding_attention, got {v}"),
            )),
        })
        .collect::<Result<Vec<bool>, _>>()
        .map(Some)
}

/// `eos_token_id`: an integer, a list of integers, or null.
fn eos_ids(obj: &Obj) -> Result<Vec<u32>, ConfigError> {
    match obj.get("eos_token_id") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(|v| as_u32(v, "eos_token_id")).collect(),
        Some(v) => Ok(vec![as_u32(v, "eos_token_id")?]),
    }
}

fn bad(field: &str, reason: &str) -> ConfigError {
    ConfigError::BadField {
        field: field.to_string(),
        reason: reason.to_string(),
    }
}

fn missing(field: &str) -> ConfigError {
    ConfigError::MissingField(field.to_string())
}

/// The value under `key`, treating JSON null as absent.
fn present<'a>(obj: &'a Obj, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn opt_usize(obj: &Obj, key: &str) -> Result<Option<usize>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| bad(key, &format!("expected a non-negative integer, got {v}")))
        })
        .transpose()
}

fn req_usize(obj: &Obj, key: &str) -> Result<usize, ConfigError> {
    opt_usize(obj, key)?.ok_or_else(|| missing(key))
}

fn as_u32(v: &Value, key: &str) -> Result<u32, ConfigError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad(key, &format!("expected a token id, got {v}")))
}

fn opt_u32(obj: &Obj, key: &str) -> Result<Option<u32>, ConfigError> {
    present(obj, key).map(|v| as_u32(v, key)).transpose()
}

fn opt_f32(obj: &Obj, key: &str) -> Result<Option<f32>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| bad(key, &format!("expected a number, got {v}")))
        })
        .transpose()
}

fn opt_bool(obj: &Obj, key: &str) -> Result<Option<bool>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_bool()
                .ok_or_else(|| bad(key, &format!("expected true or false, got {v}")))
        })
        .transpose()
}

fn opt_str<'a>(obj: &'a Obj, key: &str) -> Result<Option<&'a str>, ConfigError> {
    present(obj, key)
        .map(|v| {
            v.as_str()
                .ok_or_else(|| bad(key, &format!("expected a string, got {v}")))
        })
        .transpose()
}
