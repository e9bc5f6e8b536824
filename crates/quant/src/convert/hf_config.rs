//! The JSON files of an HF checkpoint: `config.json` (with both the older keys, `rope_theta`
//! / `rope_scaling` / `torch_dtype`, and the newer `rope_parameters` / `dtype`, as recent
//! transformers writes them), `tokenizer_config.json` and `generation_config.json`.

use kestrel_model::config::{ModelConfig, RopeScaling};
use kestrel_model::families;
use kestrel_model::tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

use super::{ConvertError, FloatType};

/// `config.json` for `config` stored as `dtype`.
pub(crate) fn config_json(config: &ModelConfig, dtype: FloatType) -> Result<Value, ConvertError> {
    let family = config.architecture;
    if family.gguf_export_name().is_none() {
        return Err(ConvertError::Unsupported(format!(
            "architecture {} (convert handles {})",
            family.name(),
            families::registry::convertible_names()
        )));
    }
    let scaling = match &config.rope_scaling {
        None => Value::Null,
        Some(RopeScaling::Linear { factor }) => {
            json!({"rope_type": "linear", "type": "linear", "factor": factor})
        }
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position,
        }) => json!({
            "rope_type": "llama3", "factor": factor, "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor, "original_max_position_embeddings": original_max_position,
        }),
        Some(RopeScaling::FreqFactors { .. }) => {
            return Err(ConvertError::Unsupported(
                "per-frequency rope factors (rope_freqs.weight) have no config.json form".into(),
            ))
        }
        Some(other) => {
            return Err(ConvertError::Unsupported(format!(
                "{} rope scaling in a converted config.json",
                other.kind()
            )))
        }
    };
    let mut rope_parameters = match &scaling {
        Value::Object(m) => m.clone(),
        _ => Map::from_iter([("rope_type".to_string(), json!("default"))]),
    };
    rope_parameters.remove("type");
    rope_parameters.insert("rope_theta".into(), json!(config.rope_theta));
    let eos = match config.eos_token_ids.as_slice() {
        [] => Value::Null,
        [one] => json!(one),
        many => json!(many),
    };
    Ok(json!({
        "architectures": [family.hf_class()],
        "model_type": family.name(),
        "attention_bias": config.attention_bias,
        "attention_dropout": 0.0,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": eos,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "hidden_size": config.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": config.intermediate_size,
        "max_position_embeddings": config.max_position_embeddings,
        "mlp_bias": false,
        "num_attention_heads": config.n_heads,
        "num_hidden_layers": config.n_layers,
        "num_key_value_heads": config.n_kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_scaling": scaling,
        "rope_theta": config.rope_theta,
        "rope_parameters": Value::Object(rope_parameters),
        "sliding_window": config.sliding_window,
        "tie_word_embeddings": config.tie_word_embeddings,
        "torch_dtype": dtype.torch_name(),
        "dtype": dtype.torch_name(),
        "use_cache": true,
        "vocab_size": config.vocab_size,
    }))
}

/// `tokenizer_config.json`: special tokens, BOS/EOS behaviour and the chat template.
pub(crate) fn tokenizer_config_json(
    tok: &Tokenizer,
    add_bos: bool,
    add_eos: bool,
    max_len: usize,
) -> Value {
    json!({
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "bos_token": tok.bos_token(),
        "eos_token": tok.eos_token(),
        "chat_template": tok.chat_template(),
        "clean_up_tokenization_spaces": false,
        "model_max_length": max_len,
        "tokenizer_class": "PreTrainedTokenizerFast",
    })
}

/// `generation_config.json`: BOS/EOS ids.
pub(crate) fn generation_config_json(config: &ModelConfig) -> Value {
    json!({"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_ids, "_from_model_config": true})
}
