//! [`DecoderModel`]: a decoder-only transformer (token embedding, a stack of
//! [`AttentionBlock`] + [`FeedForward`] layers, final norm, LM head). The supported families
//! (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2/3, BLOOM, Mixtral, Qwen MoE, gpt-oss) differ
//! only in per-model features, all read from the [`ModelConfig`] and its architecture: q/k/v
//! biases (Qwen2, gpt-oss, which also has an o bias and attention sinks), per-head q/k
//! RMSNorm before RoPE (Qwen3, Gemma 3), the RoPE pairing (by architecture and file format), a
//! sliding window and RoPE base per layer, Gemma's post-norms, GeGLU, embedding scale and
//! soft-capping, sparse MoE MLPs (gpt-oss: biases and a clamped SwiGLU), and the block layout (BLOOM: LayerNorm, also on the
//! embeddings; ALiBi instead of RoPE; fused QKV; GELU MLP).
//!
//! One forward pass runs a ragged batch: the tokens of all sequences are stacked into one
//! `[tokens, hidden]` matrix so every weight is read once per step, whatever the mix of
//! prefill chunks and decode tokens.

use std::sync::Arc;

use kestrel_engine::executor::BatchInput;
use kestrel_engine::expert_counts::ExpertTokenCounts;
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::attention_block::AttentionBlock;
pub use super::decoder_dims::DecoderDims;
use super::latent_attention::LatentAttention;
use super::mlp::Mlp;
use super::moe_block::{ExpertCounter, MoeBlock};
use super::naming::TensorNaming;
use super::observer::{ActivationObserver, NoObserver};
pub use super::pass::Pass;
use super::positions::Positions;
use super::tensor_loader::TensorLoader;
use super::workspace::{Workspace, WorkspaceDims};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{BlockNorm, Embedding, Linear};
use crate::lora::LoraBase;
use crate::weights::TensorSource;

/// A layer's attention: over cached keys and values of every kv head, or over one cached
/// latent row (DeepSeek's multi-head latent attention).
enum LayerAttention {
    Heads(AttentionBlock),
    Latent(LatentAttention),
}

impl LayerAttention {
    fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        d: &DecoderDims,
    ) -> Result<LayerAttention, ModelError> {
        match &cfg.mla {
            Some(mla) => Ok(LayerAttention::Latent(LatentAttention::load(
                ld, i, cfg, mla,
            )?)),
            None => {
                let positions = Positions::of(cfg, i, ld.naming);
                Ok(LayerAttention::Heads(AttentionBlock::load(
                    ld, i, cfg, d, positions,
                )?))
            }
        }
    }

    fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            LayerAttention::Heads(a) => a.linears_mut(),
            LayerAttention::Latent(a) => a.linears_mut(),
        }
    }

    fn window(&self) -> Option<usize> {
        match self {
            LayerAttention::Heads(a) => a.window(),
            LayerAttention::Latent(_) => None,
        }
    }

    fn weight_bytes(&self) -> usize {
        match self {
            LayerAttention::Heads(a) => a.weight_bytes(),
            LayerAttention::Latent(a) => a.weight_bytes(),
        }
    }

    fn forward(
        &self,
        l: usize,
        d: &DecoderDims,
        pass: &mut Pass<'_>,
        observer: &mut dyn ActivationObserver,
    ) {
        match self {
            LayerAttention::Heads(a) => a.forward(l, d, pass, observer),
            LayerAttention::Latent(a) => a.forward(l, d, pass, observer),
        }
    }
}

/// One decoder layer: attention, then the MLP (dense or sparse), each with its own residual
/// add.
struct DecoderLayer {
    attention: LayerAttention,
    ffn: Mlp,
}

impl DecoderLayer {
    fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        d: &DecoderDims,
        counter: Option<ExpertCounter>,
    ) -> Result<DecoderLayer, ModelError> {
        let mut layer = DecoderLayer {
            attention: LayerAttention::load(ld, i, cfg, d)?,
            ffn: Mlp::load(ld, i, cfg, d, counter)?,
        };
        layer.share_weight_buffer();
        Ok(layer)
    }

    /// Puts the layer's repacked projections in one buffer: decode reads them all every step,
    /// and together they fill huge pages that each alone (or its tail) would not.
    fn share_weight_buffer(&mut self) {
        let mut linears = self.attention.linears_mut();
        linears.extend(self.ffn.linears_mut());
        Linear::share_buffer(&mut linears);
    }
}

pub struct DecoderModel {
    dims: DecoderDims,
    embed: Embedding,
    /// A norm on the token embeddings (BLOOM's `word_embeddings_layernorm`).
    embed_norm: Option<BlockNorm>,
    layers: Vec<DecoderLayer>,
    norm: BlockNorm,
    head: Linear,
    tied_head: bool,
    /// Tokens routed per expert of each sparse layer (MoE models).
    expert_counts: Option<Arc<ExpertTokenCounts>>,
    /// Gemma: embeddings times `sqrt(hidden)`.
    embed_scale: Option<f32>,
    /// Gemma: `logits = cap · tanh(logits / cap)`.
    final_softcap: Option<f32>,
    /// The projections LoRA adapters may change, in this model's row order.
    lora_base: LoraBase,
}

impl DecoderModel {
    /// Latent attention (DeepSeek): prefill chunks of at least `n` tokens take the expanded
    /// path, shorter ones the absorbed one (`usize::MAX`: always absorbed; the default is
    /// [`super::latent_prefill::EXPANDED_PREFILL_MIN_TOKENS`]). No effect on other models.
    pub fn set_latent_prefill_min_tokens(&mut self, n: usize) {
        for layer in &mut self.layers {
            if let LayerAttention::Latent(a) = &mut layer.attention {
                a.set_expanded_min_tokens(n);
            }
        }
    }

    /// Load from `src`. The RoPE pairing follows the naming and architecture
    /// ([`TensorNaming::rope_style`]): llama.cpp permutes the Q/K rows of Llama-family GGUFs
    /// for interleaved RoPE; HF checkpoints and Qwen GGUFs use the rotate-half (NeoX) pairing.
    pub fn load(
        cfg: &ModelConfig,
        src: &dyn TensorSource,
        naming: TensorNaming,
    ) -> Result<DecoderModel, ModelError> {
        let dims = DecoderDims::of(cfg);
        let naming = naming.for_architecture(cfg.architecture, src);
        let ld = TensorLoader {
            src,
            naming,
            norm_offset: cfg.gemma.as_ref().map_or(0.0, |g| g.norm_offset),
        };
        let (eps, layout) = (cfg.rms_norm_eps, cfg.architecture.layout());
        let embed = Embedding::new(ld.get(&naming.embedding(), &[dims.vocab, dims.hidden])?)?;
        let tied_head = !ld.has(naming.output());
        let head = match tied_head {
            false => Linear::new(ld.get(naming.output(), &[dims.vocab, dims.hidden])?, None)?,
            true => embed.as_linear().clone(),
        }
        .packed();
        let expert_counts = cfg.moe.as_ref().map(|m| {
            let sparse = (0..dims.n_layers).filter(|&i| m.is_sparse(i)).collect();
            Arc::new(ExpertTokenCounts::new(sparse, m.n_experts))
        });
        let counter = |i: usize| {
            let counts = expert_counts.as_ref()?;
            let slot = counts.layers().iter().position(|&l| l == i)?;
            Some(ExpertCounter {
                counts: counts.clone(),
                slot,
            })
        };
        let layers = (0..dims.n_layers)
            .map(|i| DecoderLayer::load(&ld, i, cfg, &dims, counter(i)))
            .collect::<Result<_, _>>()?;
        let embed_norm = match layout.embedding_norm {
            true => Some(embedding_norm(&ld, dims.hidden, eps, layout.norm)?),
            false => None,
        };
        Ok(DecoderModel {
            dims,
            embed,
            embed_norm,
            layers,
            norm: ld.block_norm(&naming.final_norm(), dims.hidden, eps, layout.norm)?,
            head,
            tied_head,
            expert_counts,
            embed_scale: cfg.embedding_scale(),
            final_softcap: cfg.gemma.as_ref().and_then(|g| g.final_softcap),
            lora_base: LoraBase::of(cfg, naming),
        })
    }

    /// The routed-token counters of a mixture-of-experts model (`None` for dense models).
    pub fn expert_token_counts(&self) -> Option<Arc<ExpertTokenCounts>> {
        self.expert_counts.clone()
    }

    /// The sparse MLP of layer `l`, if it has one.
    pub fn moe_block(&self, l: usize) -> Option<&MoeBlock> {
        self.layers.get(l)?.ffn.as_moe()
    }

    /// What a LoRA adapter must fit to run on this model.
    pub fn lora_base(&self) -> &LoraBase {
        &self.lora_base
    }

    pub fn dims(&self) -> DecoderDims {
        self.dims
    }

    /// The attention window that bounds every layer: the largest window if every layer has
    /// one, `None` if any layer attends to the whole context.
    pub fn attention_window(&self) -> Option<usize> {
        self.layers
            .iter()
            .map(|l| l.attention.window())
            .try_fold(0, |w, lw| lw.map(|lw| w.max(lw)))
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

    /// Bytes of weights one decode step of one token reads (as stored): every layer's
    /// attention, the MLP weights it routes to, the head and one embedding row.
    pub fn token_weight_bytes(&self) -> usize {
        let per_layer = |l: &DecoderLayer| l.attention.weight_bytes() + l.ffn.token_weight_bytes();
        let embed = self.embed.as_linear();
        let row = embed.n_bytes() / embed.rows().max(1);
        let head = if self.tied_head {
            embed.n_bytes()
        } else {
            self.head.n_bytes()
        };
        row + head + self.layers.iter().map(per_layer).sum::<usize>()
    }

    /// Run the pass's batch (its rows' adapters applied), writing K/V into its cache, and put
    /// the logits of the flat token indices in `logit_rows` into `logits`
    /// (`[logit_rows.len(), vocab]`). Token ids and block tables must have been validated by
    /// the caller.
    pub fn forward(&self, pass: Pass<'_>, logit_rows: &[usize], logits: &mut Vec<f32>) {
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
        self.run_layers(&mut pass, observer);
        self.logits(logit_rows, pass.ws, pass.pool, logits);
    }

    /// Run the pass's batch like [`forward`](Self::forward) but put the final hidden states
    /// (after the final norm, before the head) of the flat token indices in `rows` into
    /// `hidden` (`[rows.len(), hidden]`): what embeddings pool.
    pub fn forward_hidden(&self, mut pass: Pass<'_>, rows: &[usize], hidden: &mut Vec<f32>) {
        self.run_layers(&mut pass, &mut NoObserver);
        self.normed_rows(rows, pass.ws);
        hidden.clear();
        hidden.extend_from_slice(&pass.ws.rows_normed);
    }

    /// Embeds the batch's tokens and runs every layer, leaving the residual stream in `ws.x`.
    fn run_layers(&self, pass: &mut Pass<'_>, observer: &mut dyn ActivationObserver) {
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
        if let Some(norm) = &self.embed_norm {
            norm.forward(&ws.x[..t * d.hidden], &mut ws.h[..t * d.hidden]);
            ws.x[..t * d.hidden].copy_from_slice(&ws.h[..t * d.hidden]);
        }
        for (l, layer) in self.layers.iter().enumerate() {
            layer.attention.forward(l, &d, pass, observer);
            let io = super::mlp::MlpIo { t, lora: pass.lora };
            layer.ffn.forward(l, &d, io, pass.ws, pool, observer);
        }
    }

    /// The final norm of the residual rows `rows`, into `ws.rows_normed`.
    fn normed_rows(&self, rows: &[usize], ws: &mut Workspace) {
        let h = self.dims.hidden;
        ws.rows.clear();
        for &r in rows {
            ws.rows.extend_from_slice(&ws.x[r * h..(r + 1) * h]);
        }
        ws.rows_normed.resize(ws.rows.len(), 0.0);
        self.norm.forward(&ws.rows, &mut ws.rows_normed);
    }

    fn logits(&self, rows: &[usize], ws: &mut Workspace, pool: &ThreadPool, logits: &mut Vec<f32>) {
        self.normed_rows(rows, ws);
        logits.resize(rows.len() * self.dims.vocab, 0.0);
        self.head
            .forward(pool, &ws.rows_normed, rows.len(), logits, &mut ws.scratch);
        if let Some(cap) = self.final_softcap {
            logits.iter_mut().for_each(|l| *l = (*l / cap).tanh() * cap);
        }
    }
}

/// The norm on the token embeddings, under the naming's name for it.
fn embedding_norm(
    ld: &TensorLoader<'_>,
    hidden: usize,
    eps: f32,
    kind: crate::config::NormKind,
) -> Result<BlockNorm, ModelError> {
    let name = ld
        .naming
        .embedding_norm("weight")
        .ok_or_else(|| ModelError::MissingTensor("token embedding norm".to_string()))?;
    ld.block_norm(&name, hidden, eps, kind)
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
