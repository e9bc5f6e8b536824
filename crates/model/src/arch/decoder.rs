//! [`DecoderModel`]: a decoder-only transformer (token embedding, a stack of
//! [`AttentionBlock`] + [`FeedForward`] layers, final norm, LM head). The supported families
//! (Llama, Mistral, Qwen2, Qwen3, Gemma 2/3, ...) differ only in per-model features, all read
//! from the [`ModelConfig`]: q/k/v biases (Qwen2), per-head q/k RMSNorm before RoPE (Qwen3,
//! Gemma 3), the RoPE pairing (by architecture and file format), a sliding window and RoPE
//! base per layer, and Gemma's post-norms, GeGLU, embedding scale and soft-capping.
//!
//! One forward pass runs a ragged batch: the tokens of all sequences are stacked into one
//! `[tokens, hidden]` matrix so every weight is read once per step, whatever the mix of
//! prefill chunks and decode tokens.

use kestrel_engine::executor::BatchInput;
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::attention_block::{AttentionBlock, Rotary};
use super::feed_forward::FeedForward;
use super::naming::TensorNaming;
use super::observer::{ActivationObserver, NoObserver};
use super::tensor_loader::TensorLoader;
use super::workspace::{Workspace, WorkspaceDims};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::kv_cache::KvCache;
use crate::layers::{Embedding, Linear, RmsNorm};
use crate::weights::TensorSource;

/// What one forward pass runs on: the batch, the KV cache it writes, the workspace and the
/// worker threads.
pub struct Pass<'a> {
    pub batch: &'a BatchInput,
    pub kv: &'a mut KvCache,
    pub ws: &'a mut Workspace,
    pub pool: &'a ThreadPool,
}

/// Sizes the forward pass needs.
#[derive(Debug, Clone, Copy)]
pub struct DecoderDims {
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub n_layers: usize,
}

impl DecoderDims {
    fn of(cfg: &ModelConfig) -> DecoderDims {
        DecoderDims {
            hidden: cfg.hidden_size,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            ffn: cfg.intermediate_size,
            vocab: cfg.vocab_size,
            n_layers: cfg.n_layers,
        }
    }
}

/// One decoder layer: attention, then the MLP, each with its own residual add.
struct DecoderLayer {
    attention: AttentionBlock,
    ffn: FeedForward,
}

impl DecoderLayer {
    fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        d: &DecoderDims,
    ) -> Result<DecoderLayer, ModelError> {
        let rotary = Rotary {
            inv_freq: cfg.layer_rope_inv_freq(i),
            style: ld.naming.rope_style(cfg.architecture),
        };
        Ok(DecoderLayer {
            attention: AttentionBlock::load(ld, i, cfg, d, rotary)?,
            ffn: FeedForward::load(ld, i, cfg, d)?,
        })
    }
}

pub struct DecoderModel {
    dims: DecoderDims,
    embed: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    head: Linear,
    tied_head: bool,
    /// Gemma: embeddings times `sqrt(hidden)`.
    embed_scale: Option<f32>,
    /// Gemma: `logits = cap · tanh(logits / cap)`.
    final_softcap: Option<f32>,
}

impl DecoderModel {
    /// Load from `src`. The RoPE pairing follows the naming and architecture
    /// ([`TensorNaming::rope_style`]): llama.cpp permutes the Q/K rows of Llama-family GGUFs
    /// for interleaved RoPE; HF checkpoints and Qwen GGUFs use the rotate-half (NeoX) pairing.
    pub fn load(
        cfg: &ModelConfig,
        src: &dyn TensorSource,
        naming: TensorNaming,
    ) -> Result<DecoderModel, ModelError> {
        let dims = DecoderDims::of(cfg);
        let ld = TensorLoader {
            src,
            naming,
            norm_offset: cfg.gemma.as_ref().map_or(0.0, |g| g.norm_offset),
        };
        let embed = Embedding::new(ld.get(naming.embedding(), &[dims.vocab, dims.hidden])?)?;
        let tied_head = !ld.has(naming.output());
        let head = match tied_head {
            false => Linear::new(ld.get(naming.output(), &[dims.vocab, dims.hidden])?, None)?,
            true => embed.as_linear().clone(),
        }
        .packed();
        let layers = (0..dims.n_layers)
            .map(|i| DecoderLayer::load(&ld, i, cfg, &dims))
            .collect::<Result<_, _>>()?;
        Ok(DecoderModel {
            dims,
            embed,
            layers,
            norm: ld.norm(naming.final_norm(), dims.hidden, cfg.rms_norm_eps)?,
            head,
            tied_head,
            embed_scale: cfg.embedding_scale(),
            final_softcap: cfg.gemma.as_ref().and_then(|g| g.final_softcap),
        })
    }

    pub fn dims(&self) -> DecoderDims {
        self.dims
    }

    /// Bytes of weights (as stored).
    pub fn weight_bytes(&self) -> usize {
        let per_layer = |l: &DecoderLayer| l.attention.weight_bytes() + l.ffn.weight_bytes();
        let head = if self.tied_head {
            0
        } else {
            self.head.n_bytes()
        };
        self.embed.as_linear().n_bytes() + head + self.layers.iter().map(per_layer).sum::<usize>()
    }

    /// Run `batch`, writing K/V into `kv`, and put the logits of the flat token indices in
    /// `logit_rows` into `logits` (`[logit_rows.len(), vocab]`). Token ids and block tables must
    /// have been validated by the caller.
    pub fn forward(
        &self,
        batch: &BatchInput,
        logit_rows: &[usize],
        kv: &mut KvCache,
        ws: &mut Workspace,
        pool: &ThreadPool,
        logits: &mut Vec<f32>,
    ) {
        let pass = Pass {
            batch,
            kv,
            ws,
            pool,
        };
        self.forward_observed(pass, logit_rows, logits, &mut NoObserver);
    }

    /// [`forward`](Self::forward), showing the input of every linear layer to `observer`
    /// (calibration for activation-aware quantization).
    pub fn forward_observed(
        &self,
        mut pass: Pass<'_>,
        logit_rows: &[usize],
        logits: &mut Vec<f32>,
        observer: &mut dyn ActivationObserver,
    ) {
        let (batch, pool) = (pass.batch, pass.pool);
        let d = self.dims;
        let t = batch.num_tokens();
        let ws = &mut *pass.ws;
        ws.reserve(&WorkspaceDims {
            tokens: t,
            hidden: d.hidden,
            q_dim: d.n_heads * d.head_dim,
            kv_dim: d.n_kv_heads * d.head_dim,
            ffn: d.ffn,
        });
        flatten(batch, ws);
        let tokens = std::mem::take(&mut ws.tokens);
        self.embed.forward(&tokens, &mut ws.x[..t * d.hidden]);
        if let Some(scale) = self.embed_scale {
            ws.x[..t * d.hidden].iter_mut().for_each(|v| *v *= scale);
        }
        ws.tokens = tokens;
        for (l, layer) in self.layers.iter().enumerate() {
            layer.attention.forward(l, &d, &mut pass, observer);
            layer.ffn.forward(l, &d, t, pass.ws, pool, observer);
        }
        self.logits(logit_rows, pass.ws, pool, logits);
    }

    fn logits(&self, rows: &[usize], ws: &mut Workspace, pool: &ThreadPool, logits: &mut Vec<f32>) {
        let h = self.dims.hidden;
        ws.rows.clear();
        for &r in rows {
            ws.rows.extend_from_slice(&ws.x[r * h..(r + 1) * h]);
        }
        ws.rows_normed.resize(ws.rows.len(), 0.0);
        self.norm.forward(&ws.rows, &mut ws.rows_normed);
        logits.resize(rows.len() * self.dims.vocab, 0.0);
        self.head
            .forward(pool, &ws.rows_normed, rows.len(), logits, &mut ws.scratch);
        if let Some(cap) = self.final_softcap {
            logits.iter_mut().for_each(|l| *l = (*l / cap).tanh() * cap);
        }
    }
}

/// Stack the batch's tokens and positions into the workspace.
fn flatten(batch: &BatchInput, ws: &mut Workspace) {
    ws.tokens.clear();
    ws.positions.clear();
    for s in &batch.seqs {
        ws.tokens.extend_from_slice(&s.tokens);
        ws.positions
            .extend(s.start_pos..s.start_pos + s.tokens.len());
    }
}
