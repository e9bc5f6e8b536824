//! [`TensorNaming`]: the spellings of decoder tensor names (GGUF, HF Llama-family, or an HF
//! table of a family's own, [`HfNameTable`]), the RoPE pairing each implies ([`TensorNaming::rope_style`]) and the row order of a fused
//! QKV projection ([`TensorNaming::qkv_order`]).

use kestrel_kernels::cpu::ops::RopeStyle;

use crate::config::Architecture;
use crate::weights::TensorSource;

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
    /// The fused query/key/value projection (BLOOM).
    Qkv,
    /// Latent attention (DeepSeek): the query bottleneck's down projection, its RMSNorm and
    /// up projection.
    QA,
    QANorm,
    QB,
    /// Latent attention: the projection to the compressed latent and the rotary key, the
    /// latent's RMSNorm, and the latent's expansion to every head's key and value.
    KvA,
    KvANorm,
    KvB,
    /// Latent attention in newer GGUF files: `KvB` split into its key part, transposed per head
    /// (`[heads, latent, nope]`), and its value part (`[heads, value, latent]`).
    KB,
    VB,
}

/// Which naming scheme a weight source uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorNaming {
    /// `token_embd.weight`, `blk.0.attn_q.weight`, ...
    Gguf,
    /// `model.embed_tokens.weight`, `model.layers.0.self_attn.q_proj.weight`, ...
    HuggingFace,
    /// HF names of a family's own ([`HfNameTable`]), with its prefix (`prefixed: true`) or
    /// without it, as checkpoints saved from the base model have them.
    HfTable {
        table: &'static HfNameTable,
        prefixed: bool,
    },
}

/// An HF checkpoint's tensor names where a family does not use the Llama family's
/// (`model.layers.N.…`): `{prefix}{embedding}`, `{prefix}{layers}.N.{part}.weight`, ... . A
/// family file holds its table; the loader only reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct HfNameTable {
    /// Before every name but the LM head's, in checkpoints that keep it (`transformer.`).
    pub prefix: &'static str,
    pub embedding: &'static str,
    /// The norm right after the embedding, without its `.weight` / `.bias`.
    pub embedding_norm: Option<&'static str>,
    pub final_norm: &'static str,
    /// The layers' list (`h` in `h.0.…`).
    pub layers: &'static str,
    /// The layer tensors whose names differ from the Llama family's HF names.
    pub layer_parts: &'static [(LayerTensor, &'static str)],
}

impl HfNameTable {
    fn prefix(&self, prefixed: bool) -> &'static str {
        if prefixed {
            self.prefix
        } else {
            ""
        }
    }

    fn part(&self, t: LayerTensor) -> &'static str {
        self.layer_parts
            .iter()
            .find(|(tensor, _)| *tensor == t)
            .map_or_else(|| hf_part(t), |(_, part)| part)
    }
}

/// The row order of a fused `[3·q_dim, hidden]` QKV projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkvOrder {
    /// All query rows, then all key rows, then all value rows (llama.cpp's GGUF).
    Blocked,
    /// Per head: its query, key and value rows, `[n_heads][3][head_dim]` (HF BLOOM).
    PerHead,
}

impl TensorNaming {
    /// The RoPE pairing of `arch`'s Q/K rows as this source stores them: Hugging Face
    /// checkpoints rotate halves (NeoX); a GGUF file follows llama.cpp's converter for its
    /// family (`gguf_rope_style` of [`Architecture`]).
    pub fn rope_style(self, arch: Architecture) -> RopeStyle {
        match self {
            TensorNaming::Gguf => arch.gguf_rope_style(),
            TensorNaming::HuggingFace | TensorNaming::HfTable { .. } => RopeStyle::Neox,
        }
    }

    /// The naming of `arch`'s tensors in a source named `self`: an HF checkpoint's as the
    /// family spells them (some have tables of their own, prefixed or not as `src` has them).
    pub fn for_architecture(self, arch: Architecture, src: &dyn TensorSource) -> TensorNaming {
        match self {
            TensorNaming::HuggingFace => arch.hf_naming(src),
            _ => self,
        }
    }

    /// The row order of the fused QKV projection ([`LayerTensor::Qkv`]): llama.cpp's
    /// converter regroups HF's per-head rows into `[q; k; v]`.
    pub fn qkv_order(self) -> QkvOrder {
        match self {
            TensorNaming::Gguf => QkvOrder::Blocked,
            TensorNaming::HuggingFace | TensorNaming::HfTable { .. } => QkvOrder::PerHead,
        }
    }

    pub fn embedding(self) -> String {
        match self {
            TensorNaming::Gguf => "token_embd.weight".into(),
            TensorNaming::HuggingFace => "model.embed_tokens.weight".into(),
            TensorNaming::HfTable { table, prefixed } => {
                format!("{}{}", table.prefix(prefixed), table.embedding)
            }
        }
    }

    /// The norm right after the token embedding (where a family has one), with
    /// `suffix` "weight" or "bias"; `None` where the naming has no such tensor.
    pub fn embedding_norm(self, suffix: &str) -> Option<String> {
        match self {
            TensorNaming::Gguf => Some(format!("token_embd_norm.{suffix}")),
            TensorNaming::HuggingFace => None,
            TensorNaming::HfTable { table, prefixed } => table
                .embedding_norm
                .map(|norm| format!("{}{norm}.{suffix}", table.prefix(prefixed))),
        }
    }

    pub fn final_norm(self) -> String {
        match self {
            TensorNaming::Gguf => "output_norm.weight".into(),
            TensorNaming::HuggingFace => "model.norm.weight".into(),
            TensorNaming::HfTable { table, prefixed } => {
                format!("{}{}", table.prefix(prefixed), table.final_norm)
            }
        }
    }

    pub fn output(self) -> &'static str {
        match self {
            TensorNaming::Gguf => "output.weight",
            TensorNaming::HuggingFace | TensorNaming::HfTable { .. } => "lm_head.weight",
        }
    }

    /// Name of `tensor` in `layer`, with `suffix` "weight" or "bias".
    pub fn layer(self, layer: usize, tensor: LayerTensor, suffix: &str) -> String {
        match self {
            TensorNaming::Gguf => format!("blk.{layer}.{}.{suffix}", gguf_part(tensor)),
            TensorNaming::HuggingFace => {
                format!("model.layers.{layer}.{}.{suffix}", hf_part(tensor))
            }
            TensorNaming::HfTable { table, prefixed } => format!(
                "{}{}.{layer}.{}.{suffix}",
                table.prefix(prefixed),
                table.layers,
                table.part(tensor)
            ),
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
        LayerTensor::Qkv => "attn_qkv",
        LayerTensor::QA => "attn_q_a",
        LayerTensor::QANorm => "attn_q_a_norm",
        LayerTensor::QB => "attn_q_b",
        LayerTensor::KvA => "attn_kv_a_mqa",
        LayerTensor::KvANorm => "attn_kv_a_norm",
        LayerTensor::KvB => "attn_kv_b",
        LayerTensor::KB => "attn_k_b",
        LayerTensor::VB => "attn_v_b",
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
        LayerTensor::Qkv => "self_attn.qkv_proj",
        LayerTensor::QA => "self_attn.q_a_proj",
        LayerTensor::QANorm => "self_attn.q_a_layernorm",
        LayerTensor::QB => "self_attn.q_b_proj",
        LayerTensor::KvA => "self_attn.kv_a_proj_with_mqa",
        LayerTensor::KvANorm => "self_attn.kv_a_layernorm",
        LayerTensor::KvB => "self_attn.kv_b_proj",
        LayerTensor::KB => "self_attn.k_b_proj",
        LayerTensor::VB => "self_attn.v_b_proj",
    }
}
