//! Qwen3-MoE (`Qwen3MoeForCausalLM`, GGUF `qwen3moe`): Qwen3 attention (q/k RMSNorm) and
//! routed experts without a shared one.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::from_hf::Obj;
use crate::config::moe::routed_from_hf;
use crate::config::window::{opt_in_window, LayerWindow};
use crate::config::{ConfigError, MoeConfig};

pub(crate) struct Qwen3Moe;

static NAMES: FamilyNames = FamilyNames {
    name: "qwen3_moe",
    aliases: &["qwen3moe"],
    hf_model_types: &[],
    hf_class: "Qwen3MoeForCausalLM",
};

impl Family for Qwen3Moe {
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

    fn hf_moe(&self, obj: &Obj, n_layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        routed_from_hf(obj, n_layers, None).map(Some)
    }

    fn gguf_requires_experts(&self) -> bool {
        true
    }
}
