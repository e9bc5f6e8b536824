//! BLOOM's `config.json` (`BloomConfig`): `n_head`, `n_layer`, `hidden_size` (or their
//! `num_attention_heads` / `num_hidden_layers` / `n_embed` aliases), `layer_norm_epsilon`;
//! the MLP is always 4 × hidden, every head has its own K/V, the LM head is tied by default,
//! and there is no rotary (ALiBi needs no position limit: `seq_length` if given, else 2048,
//! BLOOM's training context).

use super::{bad, eos_ids, opt_bool, opt_f32, opt_str, opt_u32, opt_usize, req_usize, Obj};
use crate::config::{Architecture, ConfigError, ModelConfig};

/// Parse and validate a BLOOM config.
pub(super) fn bloom_config(obj: &Obj) -> Result<ModelConfig, ConfigError> {
    let n_heads = either(obj, "n_head", "num_attention_heads")?;
    let hidden_size = either(obj, "hidden_size", "n_embed")?;
    if n_heads == 0 || !hidden_size.is_multiple_of(n_heads) {
        return Err(ConfigError::Invalid(format!(
            "hidden_size ({hidden_size}) is not a multiple of n_head ({n_heads})"
        )));
    }
    if opt_bool(obj, "apply_residual_connection_post_layernorm")?.unwrap_or(false) {
        return Err(ConfigError::Unsupported(
            "apply_residual_connection_post_layernorm".to_string(),
        ));
    }
    if opt_usize(obj, "pretraining_tp")?.unwrap_or(1) != 1
        && opt_bool(obj, "slow_but_exact")?.unwrap_or(false)
    {
        return Err(bad(
            "slow_but_exact",
            "tensor-parallel slicing is not supported",
        ));
    }
    let max_position_embeddings = opt_usize(obj, "seq_length")?.unwrap_or(2048);
    let config = ModelConfig {
        architecture: Architecture::Bloom,
        vocab_size: req_usize(obj, "vocab_size")?,
        hidden_size,
        n_layers: either(obj, "n_layer", "num_hidden_layers")?,
        n_heads,
        n_kv_heads: n_heads,
        head_dim: hidden_size / n_heads,
        intermediate_size: 4 * hidden_size,
        rms_norm_eps: opt_f32(obj, "layer_norm_epsilon")?.unwrap_or(1e-5),
        rotary_dim: hidden_size / n_heads,
        rope_theta: 10000.0,
        rope_scaling: None,
        max_position_embeddings,
        rope_context_length: max_position_embeddings,
        tie_word_embeddings: opt_bool(obj, "tie_word_embeddings")?.unwrap_or(true),
        sliding_window: None,
        window_layers: None,
        attention_bias: true,
        qk_norm: false,
        moe: None,
        gemma: None,
        bos_token_id: opt_u32(obj, "bos_token_id")?,
        eos_token_ids: eos_ids(obj)?,
        dtype: opt_str(obj, "dtype")?
            .or(opt_str(obj, "torch_dtype")?)
            .map(str::to_string),
    };
    config.validate()?;
    Ok(config)
}

/// `key`, else its alias `alias`; one of them is required.
fn either(obj: &Obj, key: &str, alias: &str) -> Result<usize, ConfigError> {
    match opt_usize(obj, key)? {
        Some(v) => Ok(v),
        None => req_usize(obj, alias).map_err(|_| ConfigError::MissingField(key.to_string())),
    }
}
