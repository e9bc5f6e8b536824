//! [`BlockLayout`]: how a model family builds its blocks, beyond the sizes in
//! [`ModelConfig`](super::ModelConfig): which norm, which position encoding, which MLP,
//! whether Q/K/V come from one fused projection and whether the embedding is normalized.

use kestrel_kernels::cpu::attention::Alibi;

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

impl BlockLayout {
    /// RMSNorm, rotary positions, a gated SiLU MLP, separate Q/K/V projections and no
    /// embedding norm: the Llama-style decoder most families use.
    pub const ROTARY: BlockLayout = BlockLayout {
        norm: NormKind::Rms,
        positions: PositionEncoding::Rope,
        mlp: MlpKind::GatedSilu,
        fused_qkv: false,
        embedding_norm: false,
    };
}
