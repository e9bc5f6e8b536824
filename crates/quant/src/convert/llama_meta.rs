//! llama.cpp's GGUF metadata for an HF Llama-layout checkpoint ([`gguf_metadata`], keys
//! prefixed with the GGUF architecture name the family gives), and the check that a
//! configuration has the Llama layout conversion handles ([`check_llama`]).

use std::path::Path;

use kestrel_model::config::{ModelConfig, RopeScaling};
use kestrel_model::families;
use kestrel_model::weights::gguf::MetaValue;

use super::{tokenizer_meta, ConvertError};

/// Conversion handles the Llama layout only (Q/K permutation is Llama's): the families that
/// name a GGUF architecture to export as, with full rotary.
pub(crate) fn check_llama(config: &ModelConfig) -> Result<(), ConvertError> {
    export_name(config)?;
    if config.rotary_dim != config.head_dim {
        return Err(ConvertError::Unsupported(format!(
            "partial rotary ({} of head_dim {})",
            config.rotary_dim, config.head_dim
        )));
    }
    Ok(())
}

/// The GGUF `general.architecture` `config`'s family converts to.
fn export_name(config: &ModelConfig) -> Result<&'static str, ConvertError> {
    config.architecture.gguf_export_name().ok_or_else(|| {
        ConvertError::Unsupported(format!(
            "architecture {} (convert handles {})",
            config.architecture.name(),
            families::registry::convertible_names()
        ))
    })
}

/// llama.cpp's metadata for `config`, plus the tokenizer's from `dir`.
pub(crate) fn gguf_metadata(
    config: &ModelConfig,
    dir: &Path,
) -> Result<Vec<(String, MetaValue)>, ConvertError> {
    let name = dir
        .file_name()
        .map_or("model".to_string(), |n| n.to_string_lossy().into_owned());
    let arch = export_name(config)?;
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let u = |v: usize| MetaValue::U32(v as u32);
    let mut m: Vec<(String, MetaValue)> = vec![
        (
            "general.architecture".into(),
            MetaValue::String(arch.into()),
        ),
        ("general.type".into(), MetaValue::String("model".into())),
        ("general.name".into(), MetaValue::String(name)),
        (key("block_count"), u(config.n_layers)),
        (key("context_length"), u(config.max_position_embeddings)),
        (key("embedding_length"), u(config.hidden_size)),
        (key("feed_forward_length"), u(config.intermediate_size)),
        (key("attention.head_count"), u(config.n_heads)),
        (key("attention.head_count_kv"), u(config.n_kv_heads)),
        (key("rope.freq_base"), MetaValue::F32(config.rope_theta)),
        (
            key("attention.layer_norm_rms_epsilon"),
            MetaValue::F32(config.rms_norm_eps),
        ),
        (key("vocab_size"), u(config.vocab_size)),
        (key("rope.dimension_count"), u(config.head_dim)),
    ];
    if config.head_dim * config.n_heads != config.hidden_size {
        m.push((key("attention.key_length"), u(config.head_dim)));
        m.push((key("attention.value_length"), u(config.head_dim)));
    }
    if let Some(w) = config.sliding_window {
        m.push((key("attention.sliding_window"), u(w)));
    }
    match &config.rope_scaling {
        None => {}
        Some(RopeScaling::Linear { factor }) => {
            m.push((key("rope.scaling.type"), MetaValue::String("linear".into())));
            m.push((key("rope.scaling.factor"), MetaValue::F32(*factor)));
        }
        Some(other) => {
            return Err(ConvertError::Unsupported(format!(
                "rope scaling {other:?} in GGUF output"
            )))
        }
    }
    m.extend(tokenizer_meta::from_hf_dir(dir, config)?);
    Ok(m)
}
