//! Gemma 3, text only (`Gemma3ForCausalLM`, `model_type: gemma3_text`, GGUF `gemma3`): the
//! Gemma features of [`crate::config::GemmaConfig`] with per-head q/k RMSNorm, local layers
//! with their own RoPE base (`rope_local_base_freq` or the `sliding_attention` rope
//! parameters, default 10000), a sliding-window period from `sliding_window_pattern`
//! (default 6), a global RoPE base of 1e6 by default, and no attention soft-capping. The
//! multimodal `model_type: gemma3` is refused.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::from_hf::Obj;
use crate::config::gemma::{gemma_from_gguf, gemma_from_hf, gemma_window_from_hf};
use crate::config::gemma::{GemmaTraits, GgufDims};
use crate::config::window::{layer_types, LayerWindow};
use crate::config::{ConfigError, GemmaConfig};
use crate::weights::gguf::GgufFile;

pub(crate) struct Gemma3;

static NAMES: FamilyNames = FamilyNames {
    name: "gemma3",
    aliases: &[],
    hf_model_types: &["gemma3_text"],
    hf_class: "Gemma3ForCausalLM",
};

static TRAITS: GemmaTraits = GemmaTraits {
    reads_attn_softcap: false,
    hf_attn_softcap: None,
    hf_final_softcap: None,
    fixed_pattern: None,
    own_local_rope: true,
    gguf_always_slides: false,
    big_model_layers: 62,
};

impl Family for Gemma3 {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn qk_norm(&self) -> bool {
        true
    }

    /// `model_type: gemma3` is the multimodal model.
    fn check_hf_model_type(&self, model_type: &str) -> Result<(), ConfigError> {
        match model_type == NAMES.name {
            true => Err(ConfigError::Unsupported(
                "multimodal Gemma 3 (model_type gemma3); Kestrel runs the text-only Gemma3ForCausalLM (gemma3_text)".into(),
            )),
            false => Ok(()),
        }
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults {
            rope_theta: 1_000_000.0,
            tie_word_embeddings: true,
            ..HfDefaults::with_max_positions(131_072)
        }
    }

    fn hf_window(&self, obj: &Obj, n_layers: usize) -> Result<LayerWindow, ConfigError> {
        gemma_window_from_hf(obj, &TRAITS, n_layers, layer_types(obj)?)
    }

    fn hf_gemma(
        &self,
        obj: &Obj,
        head_dim: usize,
        rope_theta: f32,
    ) -> Result<Option<GemmaConfig>, ConfigError> {
        gemma_from_hf(obj, &TRAITS, head_dim, rope_theta).map(Some)
    }

    fn gguf_gemma(
        &self,
        file: &GgufFile,
        prefix: &str,
        dims: GgufDims,
    ) -> Result<Option<(GemmaConfig, LayerWindow)>, ConfigError> {
        gemma_from_gguf(file, prefix, &TRAITS, dims).map(Some)
    }
}
