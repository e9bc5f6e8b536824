//! Qwen3 (`Qwen3ForCausalLM`, GGUF `qwen3`): Llama with per-head q/k RMSNorm before RoPE
//! and Qwen2's opt-in sliding window.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::from_hf::Obj;
use crate::config::window::{opt_in_window, LayerWindow};
use crate::config::ConfigError;

pub(crate) struct Qwen3;

static NAMES: FamilyNames = FamilyNames {
    name: "qwen3",
    aliases: &[],
    hf_model_types: &[],
    hf_class: "Qwen3ForCausalLM",
};

impl Family for Qwen3 {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn qk_norm(&self) -> bool {
        true
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults::with_max_positions(32768)
    }

    fn hf_window(&self, obj: &Obj, n_layers: usize) -> Result<LayerWindow, ConfigError> {
        opt_in_window(obj, n_layers)
    }
}
