//! Gemma 2 (`Gemma2ForCausalLM`, GGUF `gemma2`): the Gemma features of
//! [`crate::config::GemmaConfig`] — soft-capped attention scores (default cap 50) and final
//! logits (default 30), every other layer sliding (4096 by default, also in GGUF files
//! without the key), one RoPE base for all layers, a tied LM head.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::gemma::GemmaTraits;

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

    fn gemma(&self) -> Option<&'static GemmaTraits> {
        Some(&TRAITS)
    }

    fn builtin_chat_template(&self) -> Option<&'static str> {
        super::builtin_templates::named("gemma")
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults {
            tie_word_embeddings: true,
            ..HfDefaults::with_max_positions(8192)
        }
    }
}
