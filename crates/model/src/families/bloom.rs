//! BLOOM (`BloomForCausalLM`, GGUF `bloom`): blocks unlike the Llama family's — LayerNorm
//! (also on the embeddings), ALiBi instead of RoPE, a fused per-head QKV projection and a
//! GELU MLP with biases — and HF tensor names of its own
//! ([`HF_NAMES`]).
//!
//! Its `config.json` (`BloomConfig`): `n_head`, `n_layer`, `hidden_size` (or their
//! `num_attention_heads` / `num_hidden_layers` / `n_embed` aliases), `layer_norm_epsilon`;
//! the MLP is always 4 × hidden, every head has its own K/V, the LM head is tied by default,
//! and there is no rotary (ALiBi needs no position limit: `seq_length` if given, else 2048,
//! BLOOM's training context).

use kestrel_kernels::cpu::attention::Alibi;

use super::family::{Family, FamilyNames, HfDefaults};
use super::Architecture;
use crate::arch::naming::{HfNameTable, LayerTensor, TensorNaming};
use crate::config::from_hf::{
    bad, eos_ids, opt_bool, opt_f32, opt_str, opt_u32, opt_usize, req_usize, Obj,
};
use crate::config::{BlockLayout, ConfigError, MlpKind, ModelConfig, NormKind, PositionEncoding};
use crate::weights::TensorSource;

pub(crate) struct Bloom;

/// BLOOM's HF names: `transformer.word_embeddings.weight`,
/// `transformer.h.0.self_attention.query_key_value.weight`, ...; without the `transformer.`
/// prefix in checkpoints saved from the base model. The tensors not listed keep the Llama
/// family's HF names.
static HF_NAMES: HfNameTable = HfNameTable {
    prefix: "transformer.",
    embedding: "word_embeddings.weight",
    embedding_norm: Some("word_embeddings_layernorm"),
    final_norm: "ln_f.weight",
    layers: "h",
    layer_parts: &[
        (LayerTensor::AttnNorm, "input_layernorm"),
        (LayerTensor::Qkv, "self_attention.query_key_value"),
        (LayerTensor::O, "self_attention.dense"),
        (LayerTensor::FfnNorm, "post_attention_layernorm"),
        (LayerTensor::Up, "mlp.dense_h_to_4h"),
        (LayerTensor::Down, "mlp.dense_4h_to_h"),
    ],
};

static NAMES: FamilyNames = FamilyNames {
    name: "bloom",
    aliases: &[],
    hf_model_types: &[],
    hf_class: "BloomForCausalLM",
};

impl Family for Bloom {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn layout(&self) -> BlockLayout {
        BlockLayout {
            norm: NormKind::Layer,
            positions: PositionEncoding::Alibi(Alibi::STANDARD),
            mlp: MlpKind::PlainGelu,
            fused_qkv: true,
            embedding_norm: true,
        }
    }

    /// BLOOM's own names, with or without the `transformer.` prefix (whichever `src` has).
    fn hf_naming(&self, src: &dyn TensorSource) -> TensorNaming {
        TensorNaming::HfTable {
            table: &HF_NAMES,
            prefixed: src.tensor(HF_NAMES.embedding).is_none(),
        }
    }

    fn hf_config(&self, arch: Architecture, obj: &Obj) -> Result<ModelConfig, ConfigError> {
        bloom_config(arch, obj)
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults {
            rms_norm_eps: 1e-5,
            tie_word_embeddings: true,
            ..HfDefaults::with_max_positions(2048)
        }
    }
}

/// Parse and validate a BLOOM config.
fn bloom_config(arch: Architecture, obj: &Obj) -> Result<ModelConfig, ConfigError> {
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
    let max_position_embeddings =
        opt_usize(obj, "seq_length")?.unwrap_or(Bloom.hf_defaults().max_positions);
    let config = ModelConfig {
        architecture: arch,
        vocab_size: req_usize(obj, "vocab_size")?,
        hidden_size,
        n_layers: either(obj, "n_layer", "num_hidden_layers")?,
        n_heads,
        n_kv_heads: n_heads,
        head_dim: hidden_size / n_heads,
        intermediate_size: 4 * hidden_size,
        rms_norm_eps: opt_f32(obj, "layer_norm_epsilon")?
            .unwrap_or(Bloom.hf_defaults().rms_norm_eps),
        rotary_dim: hidden_size / n_heads,
        rope_theta: 10000.0,
        rope_scaling: None,
        max_position_embeddings,
        rope_context_length: max_position_embeddings,
        tie_word_embeddings: opt_bool(obj, "tie_word_embeddings")?
            .unwrap_or(Bloom.hf_defaults().tie_word_embeddings),
        sliding_window: None,
        window_layers: None,
        attention_bias: true,
        qk_norm: false,
        moe: None,
        gemma: None,
        mla: None,
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
