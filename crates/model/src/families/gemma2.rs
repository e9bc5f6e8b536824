//! Gemma 2 (`Gemma2ForCausalLM`, GGUF `gemma2`): the Gemma features of
//! [`crate::config::GemmaConfig`] — soft-capped attention scores (default cap 50) and final
//! logits (default 30), every other layer sliding (4096 by default, also in GGUF files
//! without the key), one RoPE base for all layers, a tied LM head.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::from_hf::Obj;
use crate::config::gemma::{gemma_from_gguf, gemma_from_hf, gemma_window_from_hf};
use crate::config::gemma::{GemmaTraits, GgufDims};
use crate::config::window::{layer_types, LayerWindow};
use crate::config::{ConfigError, GemmaConfig};
use crate::weights::gguf::GgufFile;

pub(crate) struct Gemma2;

static NAMES: FamilyNames = FamilyNames {
    name: "gemma2",
    aliases: &[],
    hf_model_types: &[],
    hf_class: "Gemma2ForCausalLM",
};

static TRAITS: GemmaTraits = GemmaTraits {
    reads_attn_softcap: true,
    hf_attn_softcap: Some(50.0),
    hf_final_softcap: Some(30.0),
    fixed_pattern: Some(2),
    own_local_rope: false,
    gguf_always_slides: true,
    big_model_layers: 46,
};

impl Family for Gemma2 {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults {
            tie_word_embeddings: true,
            ..HfDefaults::with_max_positions(8192)
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
