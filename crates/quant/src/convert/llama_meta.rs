//! llama.cpp's GGUF metadata for an HF Llama checkpoint ([`gguf_metadata`]), and the check
//! that a configuration has the Llama layout conversion handles ([`check_llama`]).

use std::path::Path;

use kestrel_model::config::{Architecture, ModelConfig, RopeScaling};
use kestrel_model::weights::gguf::MetaValue;

use super::{tokenizer_meta, ConvertError};

/// Conversion handles the Llama layout only (Q/K permutation is Llama's).
pub(crate) fn check_llama(config: &ModelConfig) -> Result<(), ConvertError> {
    match config.architecture {
        Architecture::Llama | Architecture::Mistral if config.rotary_dim == config.head_dim => {
            Ok(())
        }
        Architecture::Llama | Architecture::Mistral => Err(ConvertError::Unsupported(format!(
            "partial rotary ({} of head_dim {})",
            config.rotary_dim, config.head_dim
        ))),
        other => Err(ConvertError::Unsupported(format!(
            "architecture {} (convert handles llama and mistral)",
            other.name()
        ))),
    }
}

/// llama.cpp's metadata for `config`, plus the tokenizer's from `dir`.
pub(crate) fn gguf_metadata(
    config: &ModelConfig,
    dir: &Path,
) -> Result<Vec<(String, MetaValue)>, ConvertError> {
    let name = dir
        .file_name()
        .map_or("model".to_string(), |n| n.to_string_lossy().into_owned());
    let u = |v: usize| MetaValue::U32(v as u32);
    let mut m: Vec<(String, MetaValue)> = vec![
        (
            "general.architecture".into(),
            MetaValue::String("llama".into()),
        ),
        ("general.type".into(), MetaValue::String("model".into())),
        ("general.name".into(), MetaValue::String(name)),
        ("llama.block_count".into(), u(config.n_layers)),
        (
            "llama.context_length".into(),
            u(config.max_position_embeddings),
        ),
        ("llama.embedding_length".into(), u(config.hidden_size)),
        (
            "llama.feed_forward_length".into(),
            u(config.intermediate_size),
        ),
        ("llama.attention.head_count".into(), u(config.n_heads)),
        ("llama.attention.head_count_kv".into(), u(config.n_kv_heads)),
        (
            "llama.rope.freq_base".into(),
            MetaValue::F32(config.rope_theta),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            MetaValue::F32(config.rms_norm_eps),
        ),
        ("llama.vocab_size".into(), u(config.vocab_size)),
        ("llama.rope.dimension_count".into(), u(config.head_dim)),
    ];
    if config.head_dim * config.n_heads != config.hidden_size {
        m.push(("llama.attention.key_length".into(), u(config.head_dim)));
        m.push(("llama.attention.value_length".into(), u(config.head_dim)));
    }
    if let Some(w) = config.sliding_window {
        m.push(("llama.attention.sliding_window".into(), u(w)));
    }
    match &config.rope_scaling {
        None => {}
        Some(RopeScaling::Linear { factor }) => {
            m.push((
                "llama.rope.scaling.type".into(),
                MetaValue::String("linear".into()),
            ));
            m.push(("llama.rope.scaling.factor".into(), MetaValue::F32(*factor)));
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
