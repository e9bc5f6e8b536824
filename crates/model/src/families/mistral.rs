//! Mistral (`MistralForCausalLM`): Llama with sliding-window attention on every layer
//! (`sliding_window`, default 4096, null = none). llama.cpp writes its GGUF as Llama's, and
//! the HF → GGUF converter does the same.

use kestrel_kernels::cpu::ops::RopeStyle;

use super::family::{Family, FamilyNames, HfDefaults};
use super::llama::Llama;
use crate::config::from_hf::Obj;
use crate::config::window::{window_size, LayerWindow};
use crate::config::ConfigError;

pub(crate) struct Mistral;

static NAMES: FamilyNames = FamilyNames {
    name: "mistral",
    aliases: &[],
    hf_model_types: &[],
    hf_class: "MistralForCausalLM",
};

impl Family for Mistral {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn gguf_rope_style(&self) -> RopeStyle {
        RopeStyle::Interleaved
    }

    fn gguf_export_name(&self) -> Option<&'static str> {
        Llama.gguf_export_name()
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults::with_max_positions(4096 * 32)
    }

    fn hf_window(&self, obj: &Obj, _n_layers: usize) -> Result<LayerWindow, ConfigError> {
        Ok(LayerWindow::every_layer(window_size(obj)?))
    }
}
