//! Llama (`LlamaForCausalLM`, GGUF `llama`): the reference decoder every default of
//! [`Family`] describes. llama.cpp's converter permutes its Q/K rows for adjacent-pair RoPE,
//! and writes a Mixtral as `llama` with experts.

use kestrel_kernels::cpu::ops::RopeStyle;

use super::family::{Family, FamilyNames, HfDefaults};
use super::{mixtral, Architecture};

pub(crate) struct Llama;

static NAMES: FamilyNames = FamilyNames {
    name: "llama",
    aliases: &[],
    hf_model_types: &[],
    hf_class: "LlamaForCausalLM",
};

impl Family for Llama {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn gguf_rope_style(&self) -> RopeStyle {
        RopeStyle::Interleaved
    }

    fn gguf_export_name(&self) -> Option<&'static str> {
        Some(NAMES.name)
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults::with_max_positions(2048)
    }

    fn with_experts(&self) -> Option<Architecture> {
        Some(Architecture::new(&mixtral::Mixtral))
    }
}
