//! [`Workspace`]: activation buffers reused across forward passes, so a steady-state decode
//! step allocates nothing.

use kestrel_kernels::cpu::attention::AttnSeq;
use kestrel_kernels::cpu::gemm::Scratch;

use super::latent_attention::LatentScratch;
use super::moe_block::MoeScratch;
use crate::lora::LoraScratch;

/// Per-forward scratch memory. Buffers only grow.
#[derive(Default)]
pub struct Workspace {
    pub tokens: Vec<u32>,
    pub positions: Vec<usize>,
    /// Residual stream, `[tokens, hidden]`.
    pub x: Vec<f32>,
    /// Normalized input / projection output, `[tokens, hidden]`.
    pub h: Vec<f32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub attn: Vec<f32>,
    /// A block's normalized output before its residual add (Gemma's post-norms),
    /// `[tokens, hidden]`.
    pub normed: Vec<f32>,
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    /// Final hidden rows whose logits are wanted, `[rows, hidden]`.
    pub rows: Vec<f32>,
    pub rows_normed: Vec<f32>,
    pub scratch: Scratch,
    /// The attention kernel's per-sequence views, kept empty between layers (only the
    /// allocation is reused).
    pub attn_seqs: Vec<AttnSeq<'static>>,
    /// The sparse MLP layers' buffers.
    pub moe: MoeScratch,
    /// The LoRA deltas' buffers.
    pub lora: LoraScratch,
    /// The latent attention layers' buffers (DeepSeek).
    pub mla: LatentScratch,
}

/// Sizes the buffers must hold for one forward pass.
pub struct WorkspaceDims {
    pub tokens: usize,
    pub hidden: usize,
    pub q_dim: usize,
    pub kv_dim: usize,
    pub ffn: usize,
}

impl Workspace {
    /// Make every buffer large enough for `d` (never shrinks).
    pub fn reserve(&mut self, d: &WorkspaceDims) {
        grow(&mut self.x, d.tokens * d.hidden);
        grow(&mut self.h, d.tokens * d.hidden);
        grow(&mut self.q, d.tokens * d.q_dim);
        grow(&mut self.k, d.tokens * d.kv_dim);
        grow(&mut self.v, d.tokens * d.kv_dim);
        grow(&mut self.attn, d.tokens * d.q_dim);
        grow(&mut self.normed, d.tokens * d.hidden);
        grow(&mut self.gate, d.tokens * d.ffn);
        grow(&mut self.up, d.tokens * d.ffn);
    }
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}
