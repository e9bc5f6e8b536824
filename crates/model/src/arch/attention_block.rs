//! [`AttentionBlock`]: the attention half of a decoder layer — norm, Q/K/V projections,
//! optional per-head Q/K norms, positions (rotary, or ALiBi biases in the attention kernel),
//! paged causal attention (optionally windowed, soft-capped and with sinks), output
//! projection (with its bias where the source has one), an
//! optional post-norm (Gemma) and the residual add.

use kestrel_kernels::cpu::attention::{
    attention_params, store_kv_many, AttnParams, AttnSeq, KvWrite,
};
use kestrel_kernels::cpu::ops::add_assign;
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::decoder::{DecoderDims, Pass};
use super::naming::LayerTensor;
use super::observer::{ActivationObserver, AttnHeads, LinearSite};
use super::positions::Positions;
use super::rows::{zip_rows, PARALLEL_ROWS};
use super::tensor_loader::TensorLoader;
use super::workspace::Workspace;
use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{BlockNorm, Linear, RmsNorm, Rotary};
use crate::lora::{LoraSite, LoraTarget};

/// Rotate the batch's `t` query rows (`qd` wide) and key rows (`kvd` wide) by their
/// positions.
fn rotate_qk(
    rotary: &Rotary,
    pool: &ThreadPool,
    t: usize,
    head_dim: usize,
    (qd, kvd): (usize, usize),
    ws: &mut Workspace,
) {
    let positions = &ws.positions[..t];
    for (x, width) in [(&mut ws.q[..t * qd], qd), (&mut ws.k[..t * kvd], kvd)] {
        pool.for_rows(x, width, PARALLEL_ROWS, &|first, rows| {
            for (row, &pos) in rows.chunks_exact_mut(width).zip(&positions[first..]) {
                rotary.apply(row, head_dim, pos);
            }
        });
    }
}

/// The `head_dim`-long RMSNorm weights applied to every query and key head.
struct QkNorm {
    q: RmsNorm,
    k: RmsNorm,
}

impl QkNorm {
    fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        head_dim: usize,
        eps: f32,
    ) -> Result<QkNorm, ModelError> {
        Ok(QkNorm {
            q: ld.layer_norm(i, LayerTensor::QNorm, head_dim, eps)?,
            k: ld.layer_norm(i, LayerTensor::KNorm, head_dim, eps)?,
        })
    }

    /// Normalize every head of the first `q_len` query and `kv_len` key values, in place
    /// (through `ws.attn`, which is free until attention runs and holds `q_len` values).
    fn apply(&self, q_len: usize, kv_len: usize, ws: &mut Workspace) {
        self.q.forward(&ws.q[..q_len], &mut ws.attn[..q_len]);
        ws.q[..q_len].copy_from_slice(&ws.attn[..q_len]);
        self.k.forward(&ws.k[..kv_len], &mut ws.attn[..kv_len]);
        ws.k[..kv_len].copy_from_slice(&ws.attn[..kv_len]);
    }
}

pub(crate) struct AttentionBlock {
    norm: BlockNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    /// Per-head RMSNorm of queries and keys before RoPE (Qwen3).
    qk_norm: Option<QkNorm>,
    positions: Positions,
    o: Linear,
    /// Gemma: RMSNorm of the projected output before the residual add.
    post_norm: Option<RmsNorm>,
    /// This layer's attention window (`None`: full causal attention).
    window: Option<usize>,
    /// The score scale (`head_dim^-1/2`, or Gemma's `query_pre_attn_scalar^-1/2`).
    scale: f32,
    /// Gemma 2's soft-capping of the scores.
    softcap: Option<f32>,
    /// gpt-oss: one sink logit per query head, in the softmax denominator only.
    sinks: Option<Vec<f32>>,
}

impl AttentionBlock {
    /// The projections, for [`Linear::share_buffer`].
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        vec![&mut self.q, &mut self.k, &mut self.v, &mut self.o]
    }

    pub fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        d: &DecoderDims,
        positions: Positions,
    ) -> Result<AttentionBlock, ModelError> {
        let (h, q, kv) = (d.hidden, d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim);
        let (eps, bias) = (cfg.rms_norm_eps, cfg.attention_bias);
        let layout = cfg.architecture.layout();
        let [q_proj, k_proj, v_proj] = match layout.fused_qkv {
            true => {
                let f = ld.fused_qkv(i, (d.n_heads, d.head_dim), h)?;
                [f.q, f.k, f.v]
            }
            false => [
                ld.linear_with_bias(i, LayerTensor::Q, q, h, bias)?,
                ld.linear_with_bias(i, LayerTensor::K, kv, h, bias)?,
                ld.linear_with_bias(i, LayerTensor::V, kv, h, bias)?,
            ],
        };
        Ok(AttentionBlock {
            norm: ld.layer_block_norm(i, LayerTensor::AttnNorm, h, eps, layout.norm)?,
            q: q_proj,
            k: k_proj,
            v: v_proj,
            qk_norm: match cfg.qk_norm {
                true => Some(QkNorm::load(ld, i, d.head_dim, eps)?),
                false => None,
            },
            positions,
            o: ld.linear(i, LayerTensor::O, h, q)?,
            post_norm: match cfg.gemma.is_some() {
                true => Some(ld.layer_norm(i, LayerTensor::PostAttnNorm, h, eps)?),
                false => None,
            },
            window: cfg.layer_window(i),
            scale: cfg.attention_scale(),
            softcap: cfg.gemma.as_ref().and_then(|g| g.attn_softcap),
            sinks: match cfg.architecture.has_attention_sinks() {
                true => Some(ld.sinks(i, d.n_heads)?),
                false => None,
            },
        })
    }

    /// This layer's attention window (`None`: full causal attention).
    pub fn window(&self) -> Option<usize> {
        self.window
    }

    /// The stored bytes of the block's projections.
    pub fn weight_bytes(&self) -> usize {
        [&self.q, &self.k, &self.v, &self.o]
            .iter()
            .map(|x| x.n_bytes())
            .sum()
    }

    /// Layer `l`'s attention over the pass's batch, added to the residual stream `ws.x`.
    pub fn forward(
        &self,
        l: usize,
        d: &DecoderDims,
        pass: &mut Pass<'_>,
        observer: &mut dyn ActivationObserver,
    ) {
        let (batch, pool) = (pass.batch, pass.pool);
        let ws = &mut *pass.ws;
        let t = batch.num_tokens();
        let (qd, kvd) = (d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim);
        let n = t * d.hidden;
        zip_rows(pool, &mut ws.h[..n], &ws.x[..n], d.hidden, &|h, x| {
            self.norm.forward(x, h)
        });
        observer.observe(l, LinearSite::Qkv, &ws.h[..t * d.hidden], t);
        Linear::forward_many(
            [&self.q, &self.k, &self.v],
            pool,
            &ws.h,
            t,
            [&mut ws.q, &mut ws.k, &mut ws.v],
            &mut ws.scratch,
        );
        if !pass.lora.is_empty() {
            let x = &ws.h[..t * d.hidden];
            for (target, y) in [
                (LoraTarget::Q, &mut ws.q[..t * qd]),
                (LoraTarget::K, &mut ws.k[..t * kvd]),
                (LoraTarget::V, &mut ws.v[..t * kvd]),
            ] {
                let site = LoraSite {
                    layer: l,
                    target,
                    x,
                    y,
                };
                pass.lora.apply(site, pool, &mut ws.lora);
            }
        }
        if let Some(norm) = &self.qk_norm {
            norm.apply(t * qd, t * kvd, ws);
        }
        if let Some(rotary) = self.positions.rotary() {
            rotate_qk(rotary, pool, t, d.head_dim, (qd, kvd), ws);
        }
        let heads = AttnHeads {
            n_heads: d.n_heads,
            n_kv_heads: d.n_kv_heads,
            head_dim: d.head_dim,
            scale: self.scale,
        };
        observer.observe_attention(l, &ws.q[..t * qd], &ws.k[..t * kvd], t, heads);
        self.store_kv(l, kvd, pass);
        self.attend(l, heads, pass);
        let ws = &mut *pass.ws;
        observer.observe(l, LinearSite::O, &ws.attn[..t * qd], t);
        self.o
            .forward(pool, &ws.attn, t, &mut ws.h, &mut ws.scratch);
        let site = LoraSite {
            layer: l,
            target: LoraTarget::O,
            x: &ws.attn[..t * qd],
            y: &mut ws.h[..t * d.hidden],
        };
        pass.lora.apply(site, pool, &mut ws.lora);
        let added = match &self.post_norm {
            Some(norm) => {
                norm.forward(&ws.h[..n], &mut ws.normed[..n]);
                &ws.normed[..n]
            }
            None => &ws.h[..n],
        };
        zip_rows(pool, &mut ws.x[..n], added, d.hidden, &|x, y| {
            add_assign(x, y)
        });
    }

    /// Write the batch's keys and values into layer `l`'s cache blocks (shared out over the
    /// pool for a prefill-sized batch).
    fn store_kv(&self, l: usize, kvd: usize, pass: &mut Pass<'_>) {
        let (ws, mut cache) = (&*pass.ws, pass.kv.layer_mut(l));
        let t = pass.batch.num_tokens();
        let writes = pass.batch.seqs.iter().map(|s| KvWrite {
            block_table: &s.block_table,
            start_pos: s.start_pos,
            n: s.tokens.len(),
        });
        store_kv_many(
            pass.pool,
            &mut cache,
            writes,
            &ws.k[..t * kvd],
            &ws.v[..t * kvd],
        );
    }

    /// Causal attention of every query of the batch over its sequence's cached keys, into
    /// `ws.attn`.
    fn attend(&self, l: usize, heads: AttnHeads, pass: &mut Pass<'_>) {
        let ws = &mut *pass.ws;
        let t = pass.batch.num_tokens();
        let qd = heads.n_heads * heads.head_dim;
        let mut seqs = recycle(std::mem::take(&mut ws.attn_seqs));
        let mut offset = 0;
        seqs.extend(pass.batch.seqs.iter().map(|s| {
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
        let params = AttnParams {
            n_heads: heads.n_heads,
            scale: heads.scale,
            window: self.window,
            softcap: self.softcap,
            alibi: self.positions.alibi(),
            sinks: self.sinks.as_deref(),
        };
        attention_params(
            pass.pool,
            &pass.kv.layer(l),
            &seqs,
            params,
            &mut ws.attn[..t * qd],
        );
        ws.attn_seqs = recycle(seqs);
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
