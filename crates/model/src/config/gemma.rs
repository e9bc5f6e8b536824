//! [`GemmaConfig`]: what Gemma 2 and Gemma 3 add to the Llama-family forward pass, and how
//! it is read from a Hugging Face `config.json` and from the GGUF llama.cpp's converter
//! writes. The readers are shared; where the generations differ they follow the
//! [`GemmaTraits`] their family files (`crate::families`) give.
//!
//! Differences from Llama, all checked against transformers' Gemma 2 / Gemma 3 modeling
//! code and llama.cpp's Gemma graphs:
//!
//! * RMSNorm multiplies by `1 + w`; HF checkpoints store `w`, llama.cpp's converter stores
//!   `1 + w` ([`GemmaConfig::norm_offset`]: 1 for HF, 0 for GGUF). Every layer has four norms:
//!   input, post-attention (on the attention output, before the residual add),
//!   pre-feed-forward and post-feed-forward.
//! * GeGLU MLP (`gelu_pytorch_tanh`), embeddings multiplied by `sqrt(hidden)` (in f32).
//! * Attention scale `query_pre_attn_scalar^-1/2`. GGUF files do not carry the scalar;
//!   llama.cpp uses `head_dim^-1/2`, and `(hidden / heads)^-1/2` for the 27B models (the
//!   ones whose scalar differs from head_dim), told apart by their layer count.
//! * Interleaved sliding-window (local) and global layers. Local layers rotate with their
//!   own RoPE base and no RoPE scaling; global ones with `rope_theta` and the scaling.
//! * Optional tanh soft-capping of attention scores (Gemma 2) and of the final logits.
//!   transformers' Gemma 3 ignores `attn_logit_softcapping` (its attention never passes it
//!   on, and llama.cpp's converter refuses a Gemma 3 that sets it), so Kestrel does too.

use serde_json::{Map, Value};

use super::window::LayerWindow;
use super::ConfigError;
use crate::weights::gguf::{GgufFile, MetaArray, OptionalKey};

/// Where the Gemma generations differ; each Gemma family file holds its own.
#[derive(Debug)]
pub(crate) struct GemmaTraits {
    /// Attention scores are soft-capped (`attn_logit_softcapping`); else the key is ignored.
    pub reads_attn_softcap: bool,
    /// The attention and final caps of a `config.json` that leaves the keys out.
    pub hf_attn_softcap: Option<f32>,
    pub hf_final_softcap: Option<f32>,
    /// Every `n`-th layer is global; `None`: `sliding_window_pattern` says (default 6).
    pub fixed_pattern: Option<usize>,
    /// Local layers have a RoPE base of their own (else they share `rope_theta`).
    pub own_local_rope: bool,
    /// GGUF: the layers slide even without `attention.sliding_window` (4096 then).
    pub gguf_always_slides: bool,
    /// The layer count of the 27B model, which llama.cpp scales by `(hidden / heads)^-1/2`.
    pub big_model_layers: usize,
}

/// The sliding-window period when the config does not give one.
const DEFAULT_PATTERN: usize = 6;

/// Gemma-only hyper-parameters (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct GemmaConfig {
    /// Added to every stored RMSNorm weight at load (1 for HF checkpoints, 0 for GGUF).
    pub norm_offset: f32,
    /// The attention score scale (`query_pre_attn_scalar^-1/2`).
    pub attention_scale: f32,
    /// RoPE base of the sliding-window (local) layers; they use no RoPE scaling.
    pub local_rope_theta: f32,
    /// `scores = cap · tanh(scores / cap)` before the softmax (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// `logits = cap · tanh(logits / cap)`.
    pub final_softcap: Option<f32>,
}

type Obj = Map<String, Value>;

/// transformers' `layer_types` default: layer `i` slides unless `(i + 1) % pattern == 0`
/// (Gemma 2: pattern 2; Gemma 3: `sliding_window_pattern`, default 6). llama.cpp's
/// `il % pattern < pattern - 1` is the same rule.
fn pattern_flags(pattern: usize, n_layers: usize) -> Vec<bool> {
    (0..n_layers)
        .map(|i| pattern == 0 || (i + 1) % pattern != 0)
        .collect()
}

fn f32_of(obj: &Obj, key: &str) -> Result<Option<f32>, ConfigError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|f| Some(f as f32))
            .ok_or_else(|| ConfigError::BadField {
                field: key.to_string(),
                reason: format!("expected a number, got {v}"),
            }),
    }
}

/// A cap of 0 (or absent) means none.
fn cap(v: Option<f32>) -> Option<f32> {
    v.filter(|&c| c != 0.0)
}

/// The Gemma part of a `config.json`; `rope_theta` is the base of the global layers (and, for
/// Gemma 2, of every layer).
pub(crate) fn gemma_from_hf(
    obj: &Obj,
    traits: &GemmaTraits,
    head_dim: usize,
    rope_theta: f32,
) -> Result<GemmaConfig, ConfigError> {
    if obj.get("use_bidirectional_attention") == Some(&Value::Bool(true)) {
        return Err(ConfigError::Unsupported(
            "use_bidirectional_attention (an embedding model, not a causal LM)".into(),
        ));
    }
    let act = obj
        .get("hidden_activation")
        .or_else(|| obj.get("hidden_act"))
        .and_then(Value::as_str);
    if let Some(a) = act.filter(|a| !matches!(*a, "gelu_pytorch_tanh" | "gelu_tanh")) {
        return Err(ConfigError::Unsupported(format!(
            "Gemma hidden_activation {a:?} (Kestrel runs gelu_pytorch_tanh)"
        )));
    }
    let scalar = f32_of(obj, "query_pre_attn_scalar")?.unwrap_or(head_dim as f32);
    super::positive("query_pre_attn_scalar", scalar)?;
    let local = match traits.own_local_rope {
        true => {
            let params = obj.get("rope_parameters").and_then(Value::as_object);
            let sliding = params
                .and_then(|p| p.get("sliding_attention"))
                .and_then(Value::as_object);
            let from_params = sliding
                .map(|p| f32_of(p, "rope_theta"))
                .transpose()?
                .flatten();
            from_params
                .or(f32_of(obj, "rope_local_base_freq")?)
                .unwrap_or(10_000.0)
        }
        _ => rope_theta,
    };
    let read_cap = |key: &str, default: Option<f32>| -> Result<Option<f32>, ConfigError> {
        match obj.get(key) {
            None => Ok(default),
            Some(_) => Ok(cap(f32_of(obj, key)?)),
        }
    };
    let attn_softcap = match traits.reads_attn_softcap {
        true => read_cap("attn_logit_softcapping", traits.hf_attn_softcap)?,
        false => None,
    };
    Ok(GemmaConfig {
        norm_offset: 1.0,
        attention_scale: (f64::from(scalar)).powf(-0.5) as f32,
        local_rope_theta: local,
        attn_softcap,
        final_softcap: read_cap("final_logit_softcapping", traits.hf_final_softcap)?,
    })
}

/// The sliding window of a Gemma `config.json`: `sliding_window` (default 4096, null =
/// none) on the layers `layer_types` marks `sliding_attention`, else by the pattern.
pub(crate) fn gemma_window_from_hf(
    obj: &Obj,
    traits: &GemmaTraits,
    n_layers: usize,
    layer_types: Option<Vec<bool>>,
) -> Result<LayerWindow, ConfigError> {
    let size = match obj.get("sliding_window") {
        None => Some(4096),
        Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| ConfigError::BadField {
                    field: "sliding_window".into(),
                    reason: format!("expected a non-negative integer, got {v}"),
                })?,
        ),
    };
    let pattern = match traits.fixed_pattern {
        Some(p) => p,
        None => match obj.get("sliding_window_pattern").and_then(Value::as_u64) {
            Some(p) => p as usize,
            None => DEFAULT_PATTERN,
        },
    };
    let flags = layer_types.unwrap_or_else(|| pattern_flags(pattern, n_layers));
    Ok(window_of(size, flags, n_layers))
}

fn window_of(size: Option<usize>, flags: Vec<bool>, n_layers: usize) -> LayerWindow {
    if size.is_none() || !flags.contains(&true) {
        return LayerWindow::NONE;
    }
    let layers = match flags.len() == n_layers && !flags.contains(&false) {
        true => None,
        false => Some(flags),
    };
    LayerWindow { size, layers }
}

/// The Gemma part of a GGUF's metadata (`{prefix}.*` as llama.cpp reads it) and its window.
pub(crate) fn gemma_from_gguf(
    file: &GgufFile,
    prefix: &str,
    traits: &GemmaTraits,
    dims: GgufDims,
) -> Result<(GemmaConfig, LayerWindow), ConfigError> {
    let key = |s: &str| format!("{prefix}.{s}");
    let f32_key = |s: &str| file.get_f32(&key(s)).optional();
    let window_key = file.get_u64(&key("attention.sliding_window")).optional()?;
    // llama.cpp: Gemma 2 always slides (4096 when the key is absent), every other layer.
    let size = match traits.gguf_always_slides {
        true => Some(window_key.unwrap_or(4096) as usize),
        false => window_key.filter(|&w| w > 0).map(|w| w as usize),
    };
    let default_pattern = traits.fixed_pattern.unwrap_or(DEFAULT_PATTERN);
    let flags = gguf_swa_flags(
        file,
        &key("attention.sliding_window_pattern"),
        default_pattern,
        dims.n_layers,
    )?;
    // llama.cpp: the 27B models (62 layers for Gemma 3, 46 for Gemma 2) scale by
    // (hidden / heads)^-1/2, the others by head_dim^-1/2.
    let big = dims.n_layers == traits.big_model_layers;
    let scale_dim = match big {
        true => dims.hidden / dims.n_heads.max(1),
        false => dims.head_dim,
    };
    let local_default = match traits.own_local_rope {
        false => dims.rope_theta,
        true => 10_000.0,
    };
    let config = GemmaConfig {
        norm_offset: 0.0,
        attention_scale: (scale_dim as f64).powf(-0.5) as f32,
        local_rope_theta: f32_key("rope.freq_base_swa")?.unwrap_or(local_default),
        attn_softcap: match traits.reads_attn_softcap {
            true => cap(f32_key("attn_logit_softcapping")?),
            false => None,
        },
        final_softcap: cap(f32_key("final_logit_softcapping")?),
    };
    Ok((config, window_of(size, flags, dims.n_layers)))
}

/// Sizes [`gemma_from_gguf`] needs from the rest of the metadata.
pub(crate) struct GgufDims {
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
}

/// `{arch}.attention.sliding_window_pattern`: a per-layer bool array, or a period (as
/// llama.cpp reads it), else `default`.
pub(crate) fn gguf_swa_flags(
    file: &GgufFile,
    key: &str,
    default: usize,
    n_layers: usize,
) -> Result<Vec<bool>, ConfigError> {
    let Some(value) = file.get(key) else {
        return Ok(pattern_flags(default, n_layers));
    };
    if let Some(p) = value.as_u64() {
        return Ok(pattern_flags(p as usize, n_layers));
    }
    match value.as_array() {
        Some(MetaArray::Bool(flags)) => Ok(flags.clone()),
        _ => Err(ConfigError::BadField {
            field: key.to_string(),
            reason: "expected an integer or a list of booleans".into(),
        }),
    }
}
