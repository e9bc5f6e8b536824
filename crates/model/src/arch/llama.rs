//! [`LlamaModel`]: the Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU).
//! The family's members differ only in per-model features, all read from the
//! [`ModelConfig`]: q/k/v biases (Qwen2), per-head q/k RMSNorm before RoPE (Qwen3), the RoPE
//! pairing (by architecture and file format), and a sliding window per layer.
//!
//! One forward pass runs a ragged batch: the tokens of all sequences are stacked into one
//! `[tokens, hidden]` matrix so every weight is read once per step, whatever the mix of
//! prefill chunks and decode tokens.

use kestrel_engine::executor::BatchInput;
use kestrel_kernels::cpu::attention::{attention, store_kv, AttnSeq};
use kestrel_kernels::cpu::ops::{add_assign, silu_mul};
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::naming::{LayerTensor, TensorNaming};
use super::workspace::{Workspace, WorkspaceDims};
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::kv_cache::KvCache;
use crate::layers::to_f32_vec;
use crate::layers::{Embedding, Linear, OutlierColumns, RmsNorm, Rotary, WeightMatrix};
use crate::weights::{outlier_weight_name, TensorSource, TensorView};

/// Where a linear layer's input is taken: the inputs shared by Q/K/V, by gate/up, and the
/// inputs of the attention output and down projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinearSite {
    Qkv,
    O,
    GateUp,
    Down,
}

impl LinearSite {
    pub const ALL: [LinearSite; 4] = [
        LinearSite::Qkv,
        LinearSite::O,
        LinearSite::GateUp,
        LinearSite::Down,
    ];

    /// The site whose input feeds the GGUF tensor `blk.N.<role>.weight`, if it is a layer linear.
    pub fn of_tensor(name: &str) -> Option<(usize, LinearSite)> {
        let rest = name.strip_prefix("blk.")?;
        let (layer, role) = rest.split_once('.')?;
        let site = match role.strip_suffix(".weight")? {
            "attn_q" | "attn_k" | "attn_v" => LinearSite::Qkv,
            "attn_output" => LinearSite::O,
            "ffn_gate" | "ffn_up" => LinearSite::GateUp,
            "ffn_down" => LinearSite::Down,
            _ => return None,
        };
        Some((layer.parse().ok()?, site))
    }
}

/// Sees the input rows of every linear layer during a forward pass.
pub trait ActivationObserver {
    /// `x` holds `m` rows, the input of the linear layers at `site` of layer `layer`.
    fn observe(&mut self, layer: usize, site: LinearSite, x: &[f32], m: usize);

    /// The queries and keys of layer `layer` after RoPE, for the batch's `m` tokens: `q` is
    /// `[m, heads.n_heads * head_dim]`, `k` is `[m, heads.n_kv_heads * head_dim]`.
    fn observe_attention(
        &mut self,
        _layer: usize,
        _q: &[f32],
        _k: &[f32],
        _m: usize,
        _heads: AttnHeads,
    ) {
    }
}

/// The attention shape an [`ActivationObserver`] sees.
#[derive(Debug, Clone, Copy)]
pub struct AttnHeads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Score scale (`1 / sqrt(head_dim)`).
    pub scale: f32,
}

/// The observer of an ordinary forward pass.
struct NoObserver;

impl ActivationObserver for NoObserver {
    fn observe(&mut self, _: usize, _: LinearSite, _: &[f32], _: usize) {}
}

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
pub struct LlamaDims {
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub n_layers: usize,
}

struct Layer {
    attn_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    /// Per-head RMSNorm of queries and keys before RoPE (Qwen3).
    qk_norm: Option<QkNorm>,
    o: Linear,
    /// This layer's attention window (`None`: full causal attention).
    window: Option<usize>,
    ffn_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The `head_dim`-long RMSNorm weights applied to every query and key head.
struct QkNorm {
    q: RmsNorm,
    k: RmsNorm,
}

impl QkNorm {
    /// Normalize every head of the first `q_len` query and `kv_len` key values, in place
    /// (through `ws.attn`, which is free until attention runs and holds `q_len` values).
    fn apply(&self, q_len: usize, kv_len: usize, ws: &mut Workspace) {
        self.q.forward(&ws.q[..q_len], &mut ws.attn[..q_len]);
        ws.q[..q_len].copy_from_slice(&ws.attn[..q_len]);
        self.k.forward(&ws.k[..kv_len], &mut ws.attn[..kv_len]);
        ws.k[..kv_len].copy_from_slice(&ws.attn[..kv_len]);
    }
}

pub struct LlamaModel {
    dims: LlamaDims,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    head: Linear,
    tied_head: bool,
    rotary: Rotary,
}

/// Loads tensors by name and checks their shapes.
struct Loader<'a> {
    src: &'a dyn TensorSource,
    naming: TensorNaming,
}

impl Loader<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<TensorView, ModelError> {
        let view = self
            .src
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        if view.shape != shape {
            return Err(ModelError::BadShape {
                name: name.into(),
                expected: shape.to_vec(),
                actual: view.shape,
            });
        }
        Ok(view)
    }

    fn linear(
        &self,
        layer: usize,
        t: LayerTensor,
        rows: usize,
        cols: usize,
    ) -> Result<Linear, ModelError> {
        let view = self.get(&self.naming.layer(layer, t, "weight"), &[rows, cols])?;
        let bias_name = self.naming.layer(layer, t, "bias");
        let bias = match self.src.tensor(&bias_name) {
            Some(_) => Some(to_f32_vec(&self.get(&bias_name, &[rows])?)?),
            None => None,
        };
        let name = view.name.clone();
        let mut linear = Linear::new(view, bias)?.packed();
        if let Some(perm) = self.src.input_perm(&name) {
            linear = linear.with_input_perm(&name, perm)?;
        }
        match self.src.outlier_columns(&name) {
            Some(channels) => Ok(linear.with_outliers(self.outliers(&name, channels, rows, cols)?)),
            None => Ok(linear),
        }
    }

    /// The outlier channels of matrix `name` and their weights.
    fn outliers(
        &self,
        name: &str,
        channels: Vec<u32>,
        rows: usize,
        cols: usize,
    ) -> Result<OutlierColumns, ModelError> {
        let weight = self.get(&outlier_weight_name(name), &[rows, channels.len()])?;
        OutlierColumns::new(name, channels, WeightMatrix::new(weight)?, rows, cols)
    }

    fn norm(&self, name: &str, hidden: usize, eps: f32) -> Result<RmsNorm, ModelError> {
        RmsNorm::new(self.get(name, &[hidden])?, eps)
    }

    fn layer_norm(
        &self,
        i: usize,
        t: LayerTensor,
        len: usize,
        eps: f32,
    ) -> Result<RmsNorm, ModelError> {
        self.norm(&self.naming.layer(i, t, "weight"), len, eps)
    }

    /// A q/k/v projection; with `bias`, its bias must be present (it is read whenever it is).
    fn qkv(
        &self,
        i: usize,
        t: LayerTensor,
        rows: usize,
        cols: usize,
        bias: bool,
    ) -> Result<Linear, ModelError> {
        let bias_name = self.naming.layer(i, t, "bias");
        if bias && self.src.tensor(&bias_name).is_none() {
            return Err(ModelError::MissingTensor(bias_name));
        }
        self.linear(i, t, rows, cols)
    }

    fn qk_norm(&self, i: usize, head_dim: usize, eps: f32) -> Result<QkNorm, ModelError> {
        Ok(QkNorm {
            q: self.layer_norm(i, LayerTensor::QNorm, head_dim, eps)?,
            k: self.layer_norm(i, LayerTensor::KNorm, head_dim, eps)?,
        })
    }

    fn layer(&self, i: usize, cfg: &ModelConfig, d: &LlamaDims) -> Result<Layer, ModelError> {
        let (h, q, kv) = (d.hidden, d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim);
        let eps = cfg.rms_norm_eps;
        Ok(Layer {
            attn_norm: self.layer_norm(i, LayerTensor::AttnNorm, h, eps)?,
            q: self.qkv(i, LayerTensor::Q, q, h, cfg.attention_bias)?,
            k: self.qkv(i, LayerTensor::K, kv, h, cfg.attention_bias)?,
            v: self.qkv(i, LayerTensor::V, kv, h, cfg.attention_bias)?,
            qk_norm: match cfg.qk_norm {
                true => Some(self.qk_norm(i, d.head_dim, eps)?),
                false => None,
            },
            o: self.linear(i, LayerTensor::O, h, q)?,
            window: cfg.layer_window(i),
            ffn_norm: self.layer_norm(i, LayerTensor::FfnNorm, h, eps)?,
            gate: self.linear(i, LayerTensor::Gate, d.ffn, h)?,
            up: self.linear(i, LayerTensor::Up, d.ffn, h)?,
            down: self.linear(i, LayerTensor::Down, h, d.ffn)?,
        })
    }
}

impl LlamaModel {
    /// Load from `src`. The RoPE pairing follows the naming and architecture
    /// ([`TensorNaming::rope_style`]): llama.cpp permutes the Q/K rows of Llama-family GGUFs
    /// for interleaved RoPE; HF checkpoints and Qwen GGUFs use the rotate-half (NeoX) pairing.
    pub fn load(
        cfg: &ModelConfig,
        src: &dyn TensorSource,
        naming: TensorNaming,
    ) -> Result<LlamaModel, ModelError> {
        let dims = LlamaDims {
            hidden: cfg.hidden_size,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            ffn: cfg.intermediate_size,
            vocab: cfg.vocab_size,
            n_layers: cfg.n_layers,
        };
        let eps = cfg.rms_norm_eps;
        let ld = Loader { src, naming };
        let embed = Embedding::new(ld.get(naming.embedding(), &[dims.vocab, dims.hidden])?)?;
        let tied_head = src.tensor(naming.output()).is_none();
        let head = match tied_head {
            false => Linear::new(ld.get(naming.output(), &[dims.vocab, dims.hidden])?, None)?,
            true => embed.as_linear().clone(),
        }
        .packed();
        let layers = (0..dims.n_layers)
            .map(|i| ld.layer(i, cfg, &dims))
            .collect::<Result<_, _>>()?;
        Ok(LlamaModel {
            dims,
            embed,
            layers,
            norm: ld.norm(naming.final_norm(), dims.hidden, eps)?,
            head,
            tied_head,
            rotary: Rotary::new(cfg, naming.rope_style(cfg.architecture)),
        })
    }

    pub fn dims(&self) -> LlamaDims {
        self.dims
    }

    /// Bytes of weights (as stored).
    pub fn weight_bytes(&self) -> usize {
        let per_layer = |l: &Layer| {
            [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                .iter()
                .map(|x| x.n_bytes())
                .sum::<usize>()
        };
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
        ws.tokens = tokens;
        for (l, layer) in self.layers.iter().enumerate() {
            self.attention_block(l, layer, &mut pass, observer);
            self.mlp_block(l, layer, t, pass.ws, pool, observer);
        }
        self.logits(logit_rows, pass.ws, pool, logits);
    }

    fn attention_block(
        &self,
        l: usize,
        layer: &Layer,
        pass: &mut Pass<'_>,
        observer: &mut dyn ActivationObserver,
    ) {
        let (batch, pool) = (pass.batch, pass.pool);
        let (kv, ws) = (&mut *pass.kv, &mut *pass.ws);
        let d = self.dims;
        let t = batch.num_tokens();
        let (qd, kvd) = (d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim);
        layer
            .attn_norm
            .forward(&ws.x[..t * d.hidden], &mut ws.h[..t * d.hidden]);
        observer.observe(l, LinearSite::Qkv, &ws.h[..t * d.hidden], t);
        layer.q.forward(pool, &ws.h, t, &mut ws.q, &mut ws.scratch);
        layer.k.forward(pool, &ws.h, t, &mut ws.k, &mut ws.scratch);
        layer.v.forward(pool, &ws.h, t, &mut ws.v, &mut ws.scratch);
        if let Some(norm) = &layer.qk_norm {
            norm.apply(t * qd, t * kvd, ws);
        }
        self.rope_qk(t, ws);
        let scale = 1.0 / (d.head_dim as f32).sqrt();
        let heads = AttnHeads {
            n_heads: d.n_heads,
            n_kv_heads: d.n_kv_heads,
            head_dim: d.head_dim,
            scale,
        };
        observer.observe_attention(l, &ws.q[..t * qd], &ws.k[..t * kvd], t, heads);
        let mut cache = kv.layer_mut(l);
        let mut i = 0;
        for seq in &batch.seqs {
            for j in 0..seq.tokens.len() {
                let (k_row, v_row) = (&ws.k[i * kvd..(i + 1) * kvd], &ws.v[i * kvd..(i + 1) * kvd]);
                store_kv(
                    &mut cache,
                    &seq.block_table,
                    seq.start_pos + j,
                    k_row,
                    v_row,
                );
                i += 1;
            }
        }
        let mut seqs = recycle(std::mem::take(&mut ws.attn_seqs));
        let mut offset = 0;
        seqs.extend(batch.seqs.iter().map(|s| {
            let n = s.tokens.len();
            let a = AttnSeq {
                q: &ws.q[offset * qd..(offset + n) * qd],
                n_q: n,
                q_start_pos: s.start_pos,
                block_table: &s.block_table,
            };
            offset += n;
            a
        }));
        attention(
            pool,
            &kv.layer(l),
            &seqs,
            d.n_heads,
            scale,
            layer.window,
            &mut ws.attn[..t * qd],
        );
        ws.attn_seqs = recycle(seqs);
        observer.observe(l, LinearSite::O, &ws.attn[..t * qd], t);
        layer
            .o
            .forward(pool, &ws.attn, t, &mut ws.h, &mut ws.scratch);
        add_assign(&mut ws.x[..t * d.hidden], &ws.h[..t * d.hidden]);
    }

    /// Rotate the batch's `t` query and key rows by their positions.
    fn rope_qk(&self, t: usize, ws: &mut Workspace) {
        let d = self.dims;
        let (qd, kvd) = (d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim);
        let rows = ws.q[..t * qd]
            .chunks_exact_mut(qd)
            .zip(ws.k[..t * kvd].chunks_exact_mut(kvd));
        for ((q, k), &pos) in rows.zip(&ws.positions[..t]) {
            self.rotary.apply(q, d.head_dim, pos);
            self.rotary.apply(k, d.head_dim, pos);
        }
    }

    fn mlp_block(
        &self,
        l: usize,
        layer: &Layer,
        t: usize,
        ws: &mut Workspace,
        pool: &ThreadPool,
        observer: &mut dyn ActivationObserver,
    ) {
        let d = self.dims;
        layer
            .ffn_norm
            .forward(&ws.x[..t * d.hidden], &mut ws.h[..t * d.hidden]);
        observer.observe(l, LinearSite::GateUp, &ws.h[..t * d.hidden], t);
        layer
            .gate
            .forward(pool, &ws.h, t, &mut ws.gate, &mut ws.scratch);
        layer
            .up
            .forward(pool, &ws.h, t, &mut ws.up, &mut ws.scratch);
        silu_mul(&mut ws.gate[..t * d.ffn], &ws.up[..t * d.ffn]);
        observer.observe(l, LinearSite::Down, &ws.gate[..t * d.ffn], t);
        layer
            .down
            .forward(pool, &ws.gate, t, &mut ws.h, &mut ws.scratch);
        add_assign(&mut ws.x[..t * d.hidden], &ws.h[..t * d.hidden]);
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
    }
}

/// An empty vector with `v`'s allocation, for borrows of another lifetime: collecting a
/// `vec::IntoIter` through `map` into a vector of a same-sized type reuses the source buffer,
/// so the per-layer list of attention sequences costs no allocation once it has grown
/// (checked by the steady-state allocation test).
fn recycle<'b>(mut v: Vec<AttnSeq<'_>>) -> Vec<AttnSeq<'b>> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
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
