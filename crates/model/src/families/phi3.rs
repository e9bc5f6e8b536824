//! Phi-3 (`Phi3ForCausalLM`, GGUF `phi3`): Llama with Q/K/V and gate/up stored fused (split
//! when loaded by [`crate::weights::FusedSplit`]), a sliding window on every layer where the
//! config sets one, LongRoPE (its config class reads `yarn` as LongRoPE too) and eps 1e-5.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::from_hf::{opt_usize, Obj};
use crate::config::window::LayerWindow;
use crate::config::ConfigError;

pub(crate) struct Phi3;

static NAMES: FamilyNames = FamilyNames {
    name: "phi3",
    aliases: &[],
    hf_model_types: &[],
    hf_class: "Phi3ForCausalLM",
};

impl Family for Phi3 {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn splits_fused(&self) -> bool {
        true
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults {
            rms_norm_eps: 1e-5,
            ..HfDefaults::with_max_positions(4096)
        }
    }

    /// transformers' Phi-3: `sliding_window` on every layer, absent or null = none.
    fn hf_window(&self, obj: &Obj, _n_layers: usize) -> Result<LayerWindow, ConfigError> {
        Ok(LayerWindow::every_layer(opt_usize(obj, "sliding_window")?))
    }

    fn hf_yarn_is_longrope(&self) -> bool {
        true
    }

    /// llama.cpp's converter writes a window of 0 for "none".
    fn gguf_window(&self, window: Option<usize>) -> Option<usize> {
        window.filter(|&w| w != 0)
    }
}
