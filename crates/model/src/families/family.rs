//! [`Family`]: what one model family tells the rest of Kestrel — its names, how it reads a
//! Hugging Face `config.json` and GGUF metadata beyond the shared keys, how its tensors are
//! named and how its blocks are built. Each family file implements it; every method but
//! [`Family::names`] and [`Family::hf_defaults`] has the default of a plain Llama-style
//! decoder, so a family states only where it differs.

use kestrel_kernels::cpu::ops::RopeStyle;

use super::Architecture;
use crate::arch::moe_naming::HfMoeLayout;
use crate::arch::naming::{LayerTensor, TensorNaming};
use crate::config::from_hf::{self, opt_bool, Obj};
use crate::config::gemma::GemmaTraits;
use crate::config::window::LayerWindow;
use crate::config::{BlockLayout, ConfigError, ExpertActivation, ModelConfig, MoeConfig};
use crate::weights::gguf::GgufFile;
use crate::weights::TensorSource;

/// The names a family goes by.
#[derive(Debug)]
pub(crate) struct FamilyNames {
    /// The registry name: HF `model_type`, and the GGUF `general.architecture` where
    /// llama.cpp has one for the family.
    pub name: &'static str,
    /// Other spellings of `name`, in GGUF files or `model_type`.
    pub aliases: &'static [&'static str],
    /// `model_type` values of `config.json` only (not GGUF) that name this family.
    pub hf_model_types: &'static [&'static str],
    /// The HF `architectures` class (`...ForCausalLM`).
    pub hf_class: &'static str,
}

/// transformers' config-class defaults for keys a `config.json` may leave out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HfDefaults {
    pub max_positions: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub tie_word_embeddings: bool,
}

impl HfDefaults {
    /// The common defaults (eps 1e-6, RoPE base 10000, untied LM head) with the class's
    /// `max_position_embeddings`.
    pub const fn with_max_positions(max_positions: usize) -> HfDefaults {
        HfDefaults {
            max_positions,
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            tie_word_embeddings: false,
        }
    }
}

/// One model family (see the module docs). Object-safe: the registry holds
/// `&'static dyn Family`, and [`Architecture`] is a handle onto one.
pub(crate) trait Family: Sync {
    fn names(&self) -> &'static FamilyNames;

    /// The block structure (default: RMSNorm, RoPE, gated SiLU MLP, separate Q/K/V).
    fn layout(&self) -> BlockLayout {
        BlockLayout::ROTARY
    }

    /// The RoPE pairing of this family's GGUF files, as llama.cpp's `llama_model_rope_type`
    /// assigns it (default: NeoX, halves; HF checkpoints are always NeoX).
    fn gguf_rope_style(&self) -> RopeStyle {
        RopeStyle::Neox
    }

    /// Queries and keys go through a per-head RMSNorm before RoPE.
    fn qk_norm(&self) -> bool {
        false
    }

    /// Checkpoints store Q/K/V and gate/up fused, split when loaded
    /// ([`crate::weights::FusedSplit`]).
    fn splits_fused(&self) -> bool {
        false
    }

    /// The naming of this family's tensors in an HF checkpoint `src`.
    fn hf_naming(&self, _src: &dyn TensorSource) -> TensorNaming {
        TensorNaming::HuggingFace
    }

    /// Where an HF checkpoint keeps the experts of a sparse layer.
    fn hf_moe_layout(&self) -> HfMoeLayout {
        HfMoeLayout::Mlp
    }

    /// The GGUF `general.architecture` the HF → GGUF converter writes for this family;
    /// `None`: the converter does not handle it.
    fn gguf_export_name(&self) -> Option<&'static str> {
        None
    }

    /// Refuse a `model_type` that names this family but a variant Kestrel does not run.
    fn check_hf_model_type(&self, _model_type: &str) -> Result<(), ConfigError> {
        Ok(())
    }

    /// The configuration in `config.json` (default: the shared decoder reader, which asks
    /// the `hf_*` methods below for this family's keys).
    fn hf_config(&self, arch: Architecture, obj: &Obj) -> Result<ModelConfig, ConfigError> {
        from_hf::decoder_config(arch, obj)
    }

    fn hf_defaults(&self) -> HfDefaults;

    /// Whether the q/k/v projections have biases (default: `attention_bias`, false).
    fn hf_attention_bias(&self, obj: &Obj) -> Result<bool, ConfigError> {
        Ok(opt_bool(obj, "attention_bias")?.unwrap_or(false))
    }

    /// The sliding window and its layers (default: none).
    fn hf_window(&self, _obj: &Obj, _n_layers: usize) -> Result<LayerWindow, ConfigError> {
        Ok(LayerWindow::NONE)
    }

    /// A `rope_type: "yarn"` means LongRoPE in this family's config class.
    fn hf_yarn_is_longrope(&self) -> bool {
        false
    }

    /// The Gemma block features this family has, read from `config.json` and GGUF metadata
    /// by [`crate::config::gemma`] (which also gives such a family its window); default: none.
    fn gemma(&self) -> Option<&'static GemmaTraits> {
        None
    }

    /// The sparse MLP (default: every layer dense).
    fn hf_moe(&self, _obj: &Obj, _n_layers: usize) -> Result<Option<MoeConfig>, ConfigError> {
        Ok(None)
    }

    /// The window of `{arch}.attention.sliding_window` (default: as written).
    fn gguf_window(&self, window: Option<usize>) -> Option<usize> {
        window
    }

    /// A GGUF of this family must have `{arch}.expert_count` > 0.
    fn gguf_requires_experts(&self) -> bool {
        false
    }

    /// `norm_topk_prob` when a GGUF has no `{arch}.expert_weights_norm` (llama.cpp's rule).
    fn gguf_norm_topk_default(&self) -> bool {
        true
    }

    /// The family's own chat template (Jinja), used where a model file carries none, as
    /// llama-server does; default: none (chat routes then refuse such a model).
    fn builtin_chat_template(&self) -> Option<&'static str> {
        None
    }

    /// The family a GGUF of this one with experts is (llama.cpp writes one `general.architecture`
    /// for a dense family and its MoE sibling); `None`: itself.
    fn with_experts(&self) -> Option<Architecture> {
        None
    }

    /// Every attention head has a learned sink logit in its softmax denominator (gpt-oss).
    fn attention_sinks(&self) -> bool {
        false
    }

    /// The norm before a sparse MLP (default: `FfnNorm`; its HF name is the same for every
    /// family, its GGUF name is not).
    fn moe_norm(&self) -> LayerTensor {
        LayerTensor::FfnNorm
    }

    /// The experts' activation in a GGUF of this family (which stores no constants for it).
    fn gguf_expert_activation(&self) -> ExpertActivation {
        ExpertActivation::SiluGated
    }

    /// The period of sliding-window layers llama.cpp assumes for this family's GGUF files when
    /// `{arch}.attention.sliding_window_pattern` is absent (layer `i` slides unless
    /// `(i + 1) % period == 0`); `None`: the window, if any, is on every layer.
    fn gguf_window_pattern(&self) -> Option<usize> {
        None
    }

    /// Whether a YaRN ramp read from this family's GGUF rounds its ends to whole dimensions
    /// (transformers' `truncate`, which GGUF files do not store; default true).
    fn gguf_yarn_truncate(&self) -> bool {
        true
    }

    /// Reads what this family's GGUF files store beyond the shared keys into `cfg`, before it
    /// is validated (default: nothing).
    fn gguf_finish(
        &self,
        _file: &GgufFile,
        _arch_name: &str,
        _cfg: &mut ModelConfig,
    ) -> Result<(), ConfigError> {
        Ok(())
    }

    /// Tokens (by their text) that end generation in this family's GGUF files besides the
    /// `eos`/`eot` ids, as llama.cpp's vocabulary marks them (default: none).
    fn gguf_end_tokens(&self) -> &'static [&'static str] {
        &[]
    }
}
