//! [`BlockLayout`]: how an architecture builds its blocks, beyond the sizes in
//! [`ModelConfig`](super::ModelConfig): which norm, which position encoding, which MLP,
//! whether Q/K/V come from one fused projection and whether the embedding is normalized.

use kestrel_kernels::cpu::attention::Alibi;

use super::Architecture;

/// The norm in front of each block and the LM head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// `x / rms(x) · w` (Llama family).
    Rms,
    /// `(x − mean) / std(x) · w + b` (BLOOM).
    Layer,
}

/// How attention learns positions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PositionEncoding {
    /// Rotary embeddings on queries and keys (the Llama family).
    Rope,
    /// Linear biases on the attention scores, one slope per head (BLOOM).
    Alibi(Alibi),
}

/// The feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpKind {
    /// `down(silu(gate(x)) · up(x))` (the Llama family).
    GatedSilu,
    /// `down(gelu_tanh(up(x)))`, with biases (BLOOM).
    PlainGelu,
}

/// An architecture's block structure (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockLayout {
    pub norm: NormKind,
    pub positions: PositionEncoding,
    pub mlp: MlpKind,
    /// Q, K and V are one `[3·q_dim, hidden]` projection.
    pub fused_qkv: bool,
    /// A norm runs on the token embeddings before the first block.
    pub embedding_norm: bool,
}

impl Architecture {
    /// This architecture's [`BlockLayout`].
    pub fn layout(self) -> BlockLayout {
        match self {
            Architecture::Llama
            | Architecture::Mistral
            | Architecture::Qwen2
            | Architecture::Qwen3
            | Architecture::Phi3
            | Architecture::Mixtral
            | Architecture::Qwen2Moe
            | Architecture::Qwen3Moe
            | Architecture::Gemma2
            | Architecture::Gemma3 => BlockLayout {
                norm: NormKind::Rms,
                positions: PositionEncoding::Rope,
                mlp: MlpKind::GatedSilu,
                fused_qkv: false,
                embedding_norm: false,
            },
            Architecture::Bloom => BlockLayout {
                norm: NormKind::Layer,
                positions: PositionEncoding::Alibi(Alibi::STANDARD),
                mlp: MlpKind::PlainGelu,
                fused_qkv: true,
                embedding_norm: true,
            },
        }
    }
}
