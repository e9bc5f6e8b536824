//! Mixtral (`MixtralForCausalLM`): Mistral attention and a sparse MoE MLP on every layer
//! (`num_local_experts`, default 8, top `num_experts_per_tok`, default 2, always
//! renormalized). HF checkpoints keep experts under `block_sparse_moe` (`w1`/`w3`/`w2`);
//! llama.cpp writes the GGUF as `llama` with `llama.expert_count`.

use kestrel_kernels::cpu::ops::RopeStyle;

use super::family::{Family, FamilyNames, HfDefaults};
use crate::arch::moe_naming::HfMoeLayout;
use crate::config::from_hf::{opt_usize, req_usize, Obj};
use crate::config::window::LayerWindow;
use crate::config::{ConfigError, ExpertActivation, MoeConfig, RouterRule};

pub(crate) struct Mixtral;

static NAMES: FamilyNames = FamilyNames {
    name: "mixtral",
    aliases: &[],
    hf_model_types: &[],
    hf_class: "MixtralForCausalLM",
};

impl Family for Mixtral {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn gguf_rope_style(&self) -> RopeStyle {
        RopeStyle::Interleaved
    }

    fn hf_moe_layout(&self) -> HfMoeLayout {
        HfMoeLayout::BlockSparse
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults::with_max_positions(4096 * 32)
    }

    /// Mixtral's config class has no window by default (absent or null: none).
    fn hf_window(&self, obj: &Obj, _n_layers: usize) -> Result<LayerWindow, ConfigError> {
        Ok(LayerWindow::every_layer(opt_usize(obj, "sliding_window")?))
    }

    fn hf_moe(&self, obj: &Obj, n_layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        Ok(Some(MoeConfig {
            n_experts: opt_usize(obj, "num_local_experts")?.unwrap_or(8),
            top_k: opt_usize(obj, "num_experts_per_tok")?.unwrap_or(2),
            expert_ffn: req_usize(obj, "intermediate_size")?,
            norm_topk_prob: true,
            shared_expert_ffn: None,
            sparse_layers: vec![true; n_layers],
            activation: ExpertActivation::SiluGated,
            routing: RouterRule::SOFTMAX,
        }))
    }
}
