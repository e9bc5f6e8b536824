//! The tensor names of a sparse MoE layer in both spellings: GGUF stores each expert
//! projection of a layer as one 3-D tensor (`blk.N.ffn_gate_exps.weight`, `[experts, rows,
//! cols]`), HF checkpoints one matrix per expert, in one of two layouts ([`HfMoeLayout`]:
//! `block_sparse_moe.experts.E.w1` or `mlp.experts.E.gate_proj`).

use super::naming::TensorNaming;
use crate::config::Architecture;

/// Where an HF checkpoint keeps a sparse layer's experts (each family says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HfMoeLayout {
    /// `model.layers.N.mlp.{gate, experts.E.{gate,up,down}_proj, shared_expert...}`.
    Mlp,
    /// `model.layers.N.block_sparse_moe.{gate, experts.E.{w1,w3,w2}}`.
    BlockSparse,
    /// `model.layers.N.mlp.{router, experts.{gate_up_proj, down_proj}}` with biases, every
    /// expert in one 3-D tensor per projection, gate and up interleaved (gpt-oss).
    FusedGateUp,
    /// `model.layers.N.mlp.{gate, experts.E.{gate,up,down}_proj, shared_experts.…}`: the
    /// [`HfMoeLayout::Mlp`] names with an ungated shared MLP named in the plural (DeepSeek).
    SharedExperts,
}

/// A tensor of a sparse MoE layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeTensor {
    /// The router, `[experts, hidden]`.
    Router,
    ExpertGate,
    ExpertUp,
    ExpertDown,
    /// The shared expert (Qwen2-MoE).
    SharedGate,
    SharedUp,
    SharedDown,
    /// The shared expert's scalar gate, `[1, hidden]`.
    SharedExpertGate,
}

impl TensorNaming {
    /// The name of `t` in `layer`. For the expert projections: the stacked 3-D tensor in GGUF,
    /// expert `expert`'s matrix in HF checkpoints (`expert` is ignored otherwise).
    pub fn moe(self, arch: Architecture, layer: usize, t: MoeTensor, expert: usize) -> String {
        match self {
            TensorNaming::Gguf => format!("blk.{layer}.{}.weight", gguf_part(t)),
            TensorNaming::HuggingFace if arch.hf_moe_layout() == HfMoeLayout::BlockSparse => {
                format!(
                    "model.layers.{layer}.block_sparse_moe.{}",
                    block_sparse_part(t, expert)
                )
            }
            TensorNaming::HuggingFace if arch.hf_moe_layout() == HfMoeLayout::FusedGateUp => {
                format!("model.layers.{layer}.mlp.{}", fused_part(t))
            }
            TensorNaming::HuggingFace if arch.hf_moe_layout() == HfMoeLayout::SharedExperts => {
                let part = mlp_part(t, expert);
                let part = part.replace("shared_expert.", "shared_experts.");
                format!("model.layers.{layer}.mlp.{part}")
            }
            // (No family with a name table of its own has experts.)
            TensorNaming::HuggingFace | TensorNaming::HfTable { .. } => {
                format!("model.layers.{layer}.mlp.{}", mlp_part(t, expert))
            }
        }
    }

    /// The router's choice bias (DeepSeek V3's `e_score_correction_bias`), `[experts]`.
    pub fn moe_score_bias(self, layer: usize) -> String {
        match self {
            TensorNaming::Gguf => format!("blk.{layer}.exp_probs_b.bias"),
            _ => format!("model.layers.{layer}.mlp.gate.e_score_correction_bias"),
        }
    }

    /// The bias of the router or of an expert projection `t` in `layer` (GGUF: `[experts,
    /// rows]` under the weight's stem; HF [`HfMoeLayout::FusedGateUp`]: gate and up share
    /// `gate_up_proj_bias`).
    pub fn moe_bias(self, arch: Architecture, layer: usize, t: MoeTensor) -> String {
        match self {
            TensorNaming::Gguf => format!("blk.{layer}.{}.bias", gguf_part(t)),
            _ => {
                let weight = self.moe(arch, layer, t, 0);
                let stem = weight.strip_suffix(".weight").unwrap_or(&weight);
                format!(
                    "{stem}{}",
                    if weight.ends_with(".weight") {
                        ".bias"
                    } else {
                        "_bias"
                    }
                )
            }
        }
    }
}

fn gguf_part(t: MoeTensor) -> &'static str {
    match t {
        MoeTensor::Router => "ffn_gate_inp",
        MoeTensor::ExpertGate => "ffn_gate_exps",
        MoeTensor::ExpertUp => "ffn_up_exps",
        MoeTensor::ExpertDown => "ffn_down_exps",
        MoeTensor::SharedGate => "ffn_gate_shexp",
        MoeTensor::SharedUp => "ffn_up_shexp",
        MoeTensor::SharedDown => "ffn_down_shexp",
        MoeTensor::SharedExpertGate => "ffn_gate_inp_shexp",
    }
}

fn block_sparse_part(t: MoeTensor, e: usize) -> String {
    match t {
        MoeTensor::Router => "gate.weight".into(),
        MoeTensor::ExpertGate => format!("experts.{e}.w1.weight"),
        MoeTensor::ExpertUp => format!("experts.{e}.w3.weight"),
        MoeTensor::ExpertDown => format!("experts.{e}.w2.weight"),
        // This layout has no shared expert; these names are never present.
        MoeTensor::SharedGate => "shared_expert.gate_proj.weight".into(),
        MoeTensor::SharedUp => "shared_expert.up_proj.weight".into(),
        MoeTensor::SharedDown => "shared_expert.down_proj.weight".into(),
        MoeTensor::SharedExpertGate => "shared_expert_gate.weight".into(),
    }
}

fn mlp_part(t: MoeTensor, e: usize) -> String {
    match t {
        MoeTensor::Router => "gate.weight".into(),
        MoeTensor::ExpertGate => format!("experts.{e}.gate_proj.weight"),
        MoeTensor::ExpertUp => format!("experts.{e}.up_proj.weight"),
        MoeTensor::ExpertDown => format!("experts.{e}.down_proj.weight"),
        MoeTensor::SharedGate => "shared_expert.gate_proj.weight".into(),
        MoeTensor::SharedUp => "shared_expert.up_proj.weight".into(),
        MoeTensor::SharedDown => "shared_expert.down_proj.weight".into(),
        MoeTensor::SharedExpertGate => "shared_expert_gate.weight".into(),
    }
}

/// [`HfMoeLayout::FusedGateUp`]: `ExpertGate` and `ExpertUp` both name the fused tensor.
fn fused_part(t: MoeTensor) -> &'static str {
    match t {
        MoeTensor::Router => "router.weight",
        MoeTensor::ExpertGate | MoeTensor::ExpertUp => "experts.gate_up_proj",
        MoeTensor::ExpertDown => "experts.down_proj",
        // This layout has no shared expert; these names are never present.
        MoeTensor::SharedGate => "shared_expert.gate_proj.weight",
        MoeTensor::SharedUp => "shared_expert.up_proj.weight",
        MoeTensor::SharedDown => "shared_expert.down_proj.weight",
        MoeTensor::SharedExpertGate => "shared_expert_gate.weight",
    }
}
