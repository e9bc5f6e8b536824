//! [`LoraTarget`]: the projections a LoRA adapter may change, and the module names that name
//! them in PEFT configs (`q_proj`, ..., fused `qkv_proj` / `gate_up_proj`) and in llama.cpp
//! adapter GGUFs (`attn_q`, ..., `attn_qkv`).

use super::error::LoraError;

/// One projection of a decoder layer that a low-rank delta is added to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LoraTarget {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl LoraTarget {
    pub const ALL: [LoraTarget; 7] = [
        LoraTarget::Q,
        LoraTarget::K,
        LoraTarget::V,
        LoraTarget::O,
        LoraTarget::Gate,
        LoraTarget::Up,
        LoraTarget::Down,
    ];

    /// Dense index (`0..7`), for per-layer tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The PEFT module name.
    pub fn peft_name(self) -> &'static str {
        match self {
            LoraTarget::Q => "q_proj",
            LoraTarget::K => "k_proj",
            LoraTarget::V => "v_proj",
            LoraTarget::O => "o_proj",
            LoraTarget::Gate => "gate_proj",
            LoraTarget::Up => "up_proj",
            LoraTarget::Down => "down_proj",
        }
    }

    /// The llama.cpp tensor-name part (`blk.N.<part>.weight`).
    pub fn gguf_name(self) -> &'static str {
        match self {
            LoraTarget::Q => "attn_q",
            LoraTarget::K => "attn_k",
            LoraTarget::V => "attn_v",
            LoraTarget::O => "attn_output",
            LoraTarget::Gate => "ffn_gate",
            LoraTarget::Up => "ffn_up",
            LoraTarget::Down => "ffn_down",
        }
    }
}

/// The module an adapter's A/B pair belongs to: one projection, or a fused one whose B rows
/// split into several projections that share A (Phi-3's `qkv_proj` and `gate_up_proj`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LoraModule {
    Single(LoraTarget),
    /// `[q; k; v]` rows.
    Qkv,
    /// `[gate; up]` rows.
    GateUp,
}

impl LoraModule {
    /// From a PEFT module name (`q_proj`, `qkv_proj`, ...).
    pub fn from_peft(name: &str) -> Result<LoraModule, LoraError> {
        match name {
            "qkv_proj" => Ok(LoraModule::Qkv),
            "gate_up_proj" => Ok(LoraModule::GateUp),
            _ => LoraTarget::ALL
                .into_iter()
                .find(|t| t.peft_name() == name)
                .map(LoraModule::Single)
                .ok_or_else(|| LoraError::UnknownTarget(name.to_string())),
        }
    }

    /// From a llama.cpp tensor-name part (`attn_q`, `attn_qkv`, ...).
    pub fn from_gguf(name: &str) -> Result<LoraModule, LoraError> {
        match name {
            "attn_qkv" => Ok(LoraModule::Qkv),
            _ => LoraTarget::ALL
                .into_iter()
                .find(|t| t.gguf_name() == name)
                .map(LoraModule::Single)
                .ok_or_else(|| LoraError::UnknownTarget(name.to_string())),
        }
    }

    /// The projections it covers, in B-row order.
    pub fn targets(self) -> &'static [LoraTarget] {
        match self {
            LoraModule::Single(t) => match t {
                LoraTarget::Q => &[LoraTarget::Q],
                LoraTarget::K => &[LoraTarget::K],
                LoraTarget::V => &[LoraTarget::V],
                LoraTarget::O => &[LoraTarget::O],
                LoraTarget::Gate => &[LoraTarget::Gate],
                LoraTarget::Up => &[LoraTarget::Up],
                LoraTarget::Down => &[LoraTarget::Down],
            },
            LoraModule::Qkv => &[LoraTarget::Q, LoraTarget::K, LoraTarget::V],
            LoraModule::GateUp => &[LoraTarget::Gate, LoraTarget::Up],
        }
    }

    pub fn name(self) -> String {
        match self {
            LoraModule::Single(t) => t.peft_name().to_string(),
            LoraModule::Qkv => "qkv_proj".to_string(),
            LoraModule::GateUp => "gate_up_proj".to_string(),
        }
    }
}
