//! gpt-oss (`GptOssForCausalLM`, `model_type` `gpt_oss`, GGUF `gpt-oss`): attention with q/k/v/o
//! biases and a learned sink logit per head, sliding-window (`sliding_window`, default 128)
//! and full layers alternating (`layer_types`, default: even layers slide), YaRN RoPE on
//! rotate-half pairs, and a sparse MLP on every layer: a router with a bias (top-k of the
//! logits, softmax over the chosen k — the same weights as a softmax over all, top-k,
//! renormalized), experts with biases whose gate and up projections HF stores interleaved in
//! one `gate_up_proj`, and a clamped SwiGLU (`swiglu_limit`, default 7; alpha 1.702).
//! llama.cpp's converter splits gate and up (`ffn_{gate,up}_exps`, MXFP4 in released files)
//! and names the pre-MLP norm `post_attention_norm`.

use super::family::{Family, FamilyNames, HfDefaults};
use crate::arch::moe_naming::HfMoeLayout;
use crate::arch::naming::LayerTensor;
use crate::config::from_hf::{opt_bool, opt_f32, opt_usize, req_usize, Obj};
use crate::config::window::{layer_types, LayerWindow};
use crate::config::{ConfigError, ExpertActivation, MoeConfig, RouterRule};

pub(crate) struct GptOss;

static NAMES: FamilyNames = FamilyNames {
    name: "gpt_oss",
    aliases: &["gpt-oss"],
    hf_model_types: &[],
    hf_class: "GptOssForCausalLM",
};

/// transformers' `GptOssConfig` default window.
const WINDOW: usize = 128;

impl Family for GptOss {
    fn names(&self) -> &'static FamilyNames {
        &NAMES
    }

    fn hf_defaults(&self) -> HfDefaults {
        HfDefaults {
            max_positions: 131072,
            rms_norm_eps: 1e-5,
            rope_theta: 150000.0,
            tie_word_embeddings: false,
        }
    }

    fn hf_moe_layout(&self) -> HfMoeLayout {
        HfMoeLayout::FusedGateUp
    }

    fn hf_attention_bias(&self, obj: &Obj) -> Result<bool, ConfigError> {
        Ok(opt_bool(obj, "attention_bias")?.unwrap_or(true))
    }

    /// `sliding_window` on the layers `layer_types` marks `sliding_attention` (default: the
    /// even layers).
    fn hf_window(&self, obj: &Obj, n_layers: usize) -> Result<LayerWindow, ConfigError> {
        let size = match obj.get("sliding_window") {
            None => Some(WINDOW),
            Some(_) => opt_usize(obj, "sliding_window")?,
        };
        let even = || (0..n_layers).map(|i| i % 2 == 0).collect();
        let flags = layer_types(obj)?.unwrap_or_else(even);
        Ok(LayerWindow {
            size,
            layers: Some(flags),
        })
    }

    fn hf_moe(&self, obj: &Obj, n_layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        let defaults = match ExpertActivation::GPT_OSS {
            ExpertActivation::ClampedSwiglu { alpha, limit } => (alpha, limit),
            ExpertActivation::SiluGated => unreachable!("gpt-oss's activation is clamped SwiGLU"),
        };
        Ok(Some(MoeConfig {
            n_experts: opt_usize(obj, "num_local_experts")?.unwrap_or(128),
            top_k: opt_usize(obj, "num_experts_per_tok")?.unwrap_or(4),
            expert_ffn: req_usize(obj, "intermediate_size")?,
            norm_topk_prob: true,
            shared_expert_ffn: None,
            sparse_layers: vec![true; n_layers],
            activation: ExpertActivation::ClampedSwiglu {
                alpha: opt_f32(obj, "swiglu_alpha")?.unwrap_or(defaults.0),
                limit: opt_f32(obj, "swiglu_limit")?.unwrap_or(defaults.1),
            },
            routing: RouterRule::SOFTMAX,
        }))
    }

    fn gguf_requires_experts(&self) -> bool {
        true
    }

    fn attention_sinks(&self) -> bool {
        true
    }

    fn moe_norm(&self) -> LayerTensor {
        LayerTensor::PostAttnNorm
    }

    fn gguf_expert_activation(&self) -> ExpertActivation {
        ExpertActivation::GPT_OSS
    }

    /// llama.cpp: `load_swa_pattern(ml, 2)`, layer 0 slides.
    fn gguf_window_pattern(&self) -> Option<usize> {
        Some(2)
    }

    /// gpt-oss's YaRN does not round the ramp (its config says `truncate: false`).
    fn gguf_yarn_truncate(&self) -> bool {
        false
    }

    /// Harmony's `<|return|>` (after the final message) and `<|call|>` (after a tool call);
    /// the converter writes only the first as `eos_token_id`.
    fn gguf_end_tokens(&self) -> &'static [&'static str] {
        &["<|return|>", "<|call|>"]
    }
}
