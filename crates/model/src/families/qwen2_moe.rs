//! Qwen2-MoE (`Qwen2MoeForCausalLM`, GGUF `qwen2moe`): Qwen2 attention (q/k/v biases from
//! `qkv_bias`, default true), routed experts plus a gated shared expert
//! (`shared_expert_intermediate_size`, default 5632); llama.cpp never renormalizes its
//! top-k weights unless the GGUF says so.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::config::from_hf::{opt_bool, Obj};
use crate::config::moe::routed_from_hf;
use crate::config::window::{opt_in_window, LayerWindow};
use crate::config::{ConfigError, MoeConfig};

pub(crate) struct Qwen2Moe;

static NAMES: FamilyNames = FamilyNames {
    name: "qwen2_moe",
    aliases: &["qwen2moe"],
    hf_model_types: &[],
    hf_class: "Qwen2MoeForCausalLM",
};

/// transformers' default size of the shared expert.
const SHARED_EXPERT_FFN: usize = 5632;

impl Family for Qwen2Moe {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults::with_max_positions(32768)
    }

    fn hf_attention_bias(&self, obj: &Obj) -> Result<bool, ConfigError> {
        Ok(opt_bool(obj, "qkv_bias")?.unwrap_or(true))
    }

    fn hf_window(&self, obj: &Obj, n_layers: usize) -> Result<LayerWindow, ConfigError> {
        opt_in_window(obj, n_layers)
    }

    fn hf_moe(&self, obj: &Obj, n_layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        routed_from_hf(obj, n_layers, Some(SHARED_EXPERT_FFN)).map(Some)
    }

    fn gguf_requires_experts(&self) -> bool {
        true
    }

    fn gguf_norm_topk_default(&self) -> bool {
        false
    }
}
