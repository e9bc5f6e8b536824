//! [`Architecture`]: a small `Copy` handle onto one entry of the family registry
//! ([`super::registry`]). Code outside `families/` asks it questions (its name, block layout,
//! RoPE pairing, ...) and never matches on which family it is.

use std::fmt;
use std::hash::{Hash, Hasher};

use kestrel_kernels::cpu::ops::RopeStyle;

use super::family::Family;
use crate::arch::moe_naming::HfMoeLayout;
use crate::arch::naming::{LayerTensor, TensorNaming};
use crate::config::from_hf::Obj;
use crate::config::{BlockLayout, ConfigError, ModelConfig};
use crate::weights::TensorSource;

/// One of the model families Kestrel runs (the registry lists them: the Llama family, which
/// differ only in features of one forward pass, its MoE relatives, Gemma 2/3, and BLOOM, whose
/// blocks differ — see [`Architecture::layout`]). Two handles are equal when they name the
/// same family.
#[derive(Clone, Copy)]
pub struct Architecture(&'static dyn Family);

impl Architecture {
    /// The handle of `family`.
    pub(crate) const fn new(family: &'static dyn Family) -> Architecture {
        Architecture(family)
    }

    /// The family behind the handle.
    pub(crate) fn family(self) -> &'static dyn Family {
        self.0
    }

    /// From a GGUF `general.architecture` or HF `model_type` name (or one of its aliases,
    /// such as `qwen2moe` for `qwen2_moe`).
    pub fn from_name(name: &str) -> Option<Architecture> {
        super::registry::by_name(name)
    }

    /// From an HF `architectures` entry such as `LlamaForCausalLM`.
    pub fn from_hf_class(class: &str) -> Option<Architecture> {
        super::registry::by_hf_class(class)
    }

    /// The registry name, as HF's `model_type` spells it.
    pub fn name(self) -> &'static str {
        self.0.names().name
    }

    /// The HF `architectures` class (`...ForCausalLM`) of this family's checkpoints.
    pub fn hf_class(self) -> &'static str {
        self.0.names().hf_class
    }

    /// This family's [`BlockLayout`].
    pub fn layout(self) -> BlockLayout {
        self.0.layout()
    }

    /// The RoPE pairing of this family's GGUF files, as llama.cpp assigns it: its converter
    /// permutes the Q/K rows of the Llama family only (for adjacent-pair rotation); the others
    /// keep Hugging Face's row order and rotate halves (NeoX). (BLOOM has no rotary positions.)
    pub fn gguf_rope_style(self) -> RopeStyle {
        self.0.gguf_rope_style()
    }

    /// Queries and keys go through a per-head RMSNorm before RoPE.
    pub fn has_qk_norm(self) -> bool {
        self.0.qk_norm()
    }

    /// This family's built-in chat template, for model files that carry none.
    pub fn builtin_chat_template(self) -> Option<&'static str> {
        self.0.builtin_chat_template()
    }

    /// The GGUF `general.architecture` the HF → GGUF converter writes for this family (its
    /// metadata keys are prefixed with it); `None` where conversion does not handle it.
    pub fn gguf_export_name(self) -> Option<&'static str> {
        self.0.gguf_export_name()
    }

    /// Checkpoints store fused Q/K/V and gate/up projections, split when loaded.
    pub(crate) fn splits_fused(self) -> bool {
        self.0.splits_fused()
    }

    /// The naming of this family's tensors in an HF checkpoint `src`.
    pub(crate) fn hf_naming(self, src: &dyn TensorSource) -> TensorNaming {
        self.0.hf_naming(src)
    }

    /// Where an HF checkpoint keeps the experts of a sparse layer.
    pub(crate) fn hf_moe_layout(self) -> HfMoeLayout {
        self.0.hf_moe_layout()
    }

    /// Every attention head has a learned sink logit in its softmax denominator.
    pub fn has_attention_sinks(self) -> bool {
        self.0.attention_sinks()
    }

    /// The norm before a sparse MLP.
    pub(crate) fn moe_norm(self) -> LayerTensor {
        self.0.moe_norm()
    }

    /// Read this family's `config.json`.
    pub(crate) fn config_from_hf(self, obj: &Obj) -> Result<ModelConfig, ConfigError> {
        self.0.hf_config(self, obj)
    }
}

impl PartialEq for Architecture {
    fn eq(&self, other: &Architecture) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Architecture {}

impl Hash for Architecture {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl fmt::Debug for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Architecture").field(&self.name()).finish()
    }
}
