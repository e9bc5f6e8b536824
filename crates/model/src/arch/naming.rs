//! [`TensorNaming`]: the two spellings of Llama-family tensor names (GGUF and HF).

/// A tensor of a Llama-family decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerTensor {
    AttnNorm,
    Q,
    K,
    V,
    O,
    FfnNorm,
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
        LayerTensor::FfnNorm => "ffn_norm",
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
        LayerTensor::FfnNorm => "post_attention_layernorm",
        LayerTensor::Gate => "mlp.gate_proj",
        LayerTensor::Up => "mlp.up_proj",
        LayerTensor::Down => "mlp.down_proj",
    }
}
