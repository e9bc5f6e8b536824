//! [`TensorNaming`]: the two spellings of Llama-family tensor names (GGUF and HF), and the
//! RoPE pairing each implies ([`TensorNaming::rope_style`]).

use kestrel_kernels::cpu::ops::RopeStyle;

use crate::config::Architecture;

/// A tensor of a Llama-family decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerTensor {
    AttnNorm,
    Q,
    K,
    V,
    O,
    /// Per-head RMSNorm of the queries (Qwen3).
    QNorm,
    /// Per-head RMSNorm of the keys (Qwen3).
    KNorm,
    FfnNorm,
    /// Gemma: the norm of the attention output, before the residual add.
    PostAttnNorm,
    /// Gemma: the norm before the MLP (Llama's `FfnNorm`, under Gemma's HF name).
    PreFfnNorm,
    /// Gemma: the norm of the MLP output, before the residual add.
    PostFfnNorm,
    Gate,
    Up,
    Down,
}

/// Which naming scheme a weight source uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorNaming {
    /// `token_embd.weight`, `blk.0.attn_q.weight`, ...
    Gguf,
    /// `model.embed_tokens.weight`, `model.layers.0.self_attn.q_proj.weight`, ...
    HuggingFace,
}

impl TensorNaming {
    /// The RoPE pairing of `arch`'s Q/K rows as this source stores them: Hugging Face
    /// checkpoints rotate halves (NeoX); a GGUF file follows llama.cpp's converter for its
    /// architecture ([`Architecture::gguf_rope_style`]).
    pub fn rope_style(self, arch: Architecture) -> RopeStyle {
        match self {
            TensorNaming::Gguf => arch.gguf_rope_style(),
            TensorNaming::HuggingFace => RopeStyle::Neox,
        }
    }

    pub fn embedding(self) -> &'static str {
        match self {
            TensorNaming::Gguf => "token_embd.weight",
            TensorNaming::HuggingFace => "model.embed_tokens.weight",
        }
    }

    pub fn final_norm(self) -> &'static str {
        match self {
            TensorNaming::Gguf => "output_norm.weight",
            TensorNaming::HuggingFace => "model.norm.weight",
        }
    }

    pub fn output(self) -> &'static str {
        match self {
            TensorNaming::Gguf => "output.weight",
            TensorNaming::HuggingFace => "lm_head.weight",
        }
    }

    /// Name of `tensor` in `layer`, with `suffix` "weight" or "bias".
    pub fn layer(self, layer: usize, tensor: LayerTensor, suffix: &str) -> String {
        match self {
            TensorNaming::Gguf => format!("blk.{layer}.{}.{suffix}", gguf_part(tensor)),
            TensorNaming::HuggingFace => {
                format!("model.layers.{layer}.{}.{suffix}", hf_part(tensor))
            }
        }
    }
}

fn gguf_part(t: LayerTensor) -> &'static str {
    match t {
        LayerTensor::AttnNorm => "attn_norm",
        LayerTensor::Q => "attn_q",
        LayerTensor::K => "attn_k",
        LayerTensor::V => "attn_v",
        LayerTensor::O => "attn_output",
        LayerTensor::QNorm => "attn_q_norm",
        LayerTensor::KNorm => "attn_k_norm",
        LayerTensor::FfnNorm | LayerTensor::PreFfnNorm => "ffn_norm",
        LayerTensor::PostAttnNorm => "post_attention_norm",
        LayerTensor::PostFfnNorm => "post_ffw_norm",
        LayerTensor::Gate => "ffn_gate",
        LayerTensor::Up => "ffn_up",
        LayerTensor::Down => "ffn_down",
    }
}

fn hf_part(t: LayerTensor) -> &'static str {
    match t {
        LayerTensor::AttnNorm => "input_layernorm",
        LayerTensor::Q => "self_attn.q_proj",
        LayerTensor::K => "self_attn.k_proj",
        LayerTensor::V => "self_attn.v_proj",
        LayerTensor::O => "self_attn.o_proj",
        LayerTensor::QNorm => "self_attn.q_norm",
        LayerTensor::KNorm => "self_attn.k_norm",
        LayerTensor::FfnNorm | LayerTensor::PostAttnNorm => "post_attention_layernorm",
        LayerTensor::PreFfnNorm => "pre_feedforward_layernorm",
        LayerTensor::PostFfnNorm => "post_feedforward_layernorm",
        LayerTensor::Gate => "mlp.gate_proj",
        LayerTensor::Up => "mlp.up_proj",
        LayerTensor::Down => "mlp.down_proj",
    }
}
