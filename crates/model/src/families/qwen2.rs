//! Qwen2 (`Qwen2ForCausalLM`, GGUF `qwen2`): Llama with q/k/v biases (always) and an
//! opt-in sliding window (`use_sliding_window`, on the layers from `max_window_layers`).

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::from_hf::Obj;
use crate::config::window::{opt_in_window, LayerWindow};
use crate::config::ConfigError;

pub(crate) struct Qwen2;

static NAMES: FamilyNames = FamilyNames {
    name: "qwen2",
    aliases: &[],
    hf_model_types: &[],
    hf_class: "Qwen2ForCausalLM",
};

impl Family for Qwen2 {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults::with_max_positions(32768)
    }

    fn hf_attention_bias(&self, _obj: &Obj) -> Result<bool, ConfigError> {
        Ok(true)
    }

    fn hf_window(&self, obj: &Obj, n_layers: usize) -> Result<LayerWindow, ConfigError> {
        opt_in_window(obj, n_layers)
    }
}
