//! Gemma 3, text only (`Gemma3ForCausalLM`, `model_type: gemma3_text`, GGUF `gemma3`): the
//! Gemma features of [`crate::config::GemmaConfig`] with per-head q/k RMSNorm, local layers
//! with their own RoPE base (`rope_local_base_freq` or the `sliding_attention` rope
//! parameters, default 10000), a sliding-window period from `sliding_window_pattern`
//! (default 6), a global RoPE base of 1e6 by default, and no attention soft-capping. The
//! multimodal `model_type: gemma3` is refused.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::gemma::GemmaTraits;
use crate::config::ConfigError;

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

    fn gemma(&self) -> Option<&'static GemmaTraits> {
        Some(&TRAITS)
    }

    fn builtin_chat_template(&self) -> Option<&'static str> {
        super::builtin_templates::named("gemma")
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
}
