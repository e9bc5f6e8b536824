//! [`LatentAttention`]: multi-head latent attention (DeepSeek V2/V3), the attention half of a
//! decoder layer — norm, queries (directly or through a low-rank bottleneck with its
//! RMSNorm), the compressed latent and the shared rotary key, paged attention over the cached
//! `[latent | rotary key]` rows, the output projection and the residual add.
//!
//! Per token the cache holds one row of `kv_lora_rank + qk_rope_head_dim` values: what MLA
//! promises, instead of every head's key and value. Attention runs in the absorbed form for
//! every token (prefill and decode alike): `kv_b`'s key part folds into the query,
//!
//! ```text
//!   score_h(j) = q_nope_h · (W_uk_h c_j) + q_rope_h · k_rope_j = [W_uk_hᵀ q_nope_h | q_rope_h] · [c_j | k_rope_j]
//! ```
//!
//! so the kernel attends over the latent rows directly (the value is the row's latent
//! prefix) and `kv_b`'s value part runs after it, on each head's weighted latent:
//! `v_h = W_uv_h Σ_j p_hj c_j`. Both halves of `kv_b` are kept per head as f32
//! (`[heads, latent, nope]` and `[heads, value, latent]`, the layout newer GGUF files store as
//! `attn_k_b` / `attn_v_b`): the absorption and the value projection are per-head products
//! of one token's vector, written here as f32 dot products.
//!
//! That is the form for decode and short chunks. A prefill chunk of at least
//! [`EXPANDED_PREFILL_MIN_TOKENS`] tokens instead expands the cached latents through `kv_b`
//! into per-head keys and values and runs the ordinary tiled attention
//! ([`super::latent_prefill`]): fewer multiply-adds per query-key pair. For that `kv_b` is
//! also kept whole (`[heads · (nope + value), latent]`) as a [`Linear`] in the file's own type
//! when the file stores it so (HF checkpoints, older GGUF files), or as f32 rebuilt from
//! `attn_k_b` / `attn_v_b`. Sequences of one batch may take different paths; the cache holds
//! the latent rows either way.

use kestrel_kernels::cpu::attention::{latent_attention, store_latent_many, KvWrite, LatentParams};
use kestrel_kernels::cpu::ops::{add_assign, RopeStyle};
use kestrel_kernels::cpu::threadpool::ThreadPool;

use super::decoder::{DecoderDims, Pass};
pub use super::latent_prefill::EXPANDED_PREFILL_MIN_TOKENS;
use super::latent_prefill::{Chunk, ExpandedPrefill, ExpandedScratch};
use super::naming::LayerTensor;
use super::observer::{ActivationObserver, LinearSite};
use super::rows::{zip_rows, PARALLEL_ROWS};
use super::tensor_loader::TensorLoader;
use super::workspace::Workspace;
use crate::config::{MlaConfig, ModelConfig};
use crate::error::ModelError;
use crate::layers::{to_f32_vec, BlockNorm, Linear, RmsNorm, Rotary};
use crate::weights::TensorView;
use kestrel_kernels::{DType, SharedBytes};

/// The queries: one projection, or a bottleneck (down, RMSNorm, up).
enum QueryProj {
    Direct(Linear),
    LowRank { a: Linear, norm: RmsNorm, b: Linear },
}

/// The buffers of the latent attention layers, reused across layers and passes.
#[derive(Debug, Default)]
pub struct LatentScratch {
    /// The bottleneck's output, `[tokens, q_lora_rank]`, and its norm.
    q_a: Vec<f32>,
    q_a_normed: Vec<f32>,
    /// Every head's `[nope | rope]` query, `[tokens, heads · qk_head_dim]`.
    q: Vec<f32>,
    /// `[latent | rotary key]` of every token, `[tokens, kv_lora_rank + qk_rope_head_dim]`.
    kv: Vec<f32>,
    /// Every head's weighted latent, `[tokens, heads · kv_lora_rank]`.
    latent: Vec<f32>,
    /// Every head's value, `[tokens, heads · v_head_dim]`.
    values: Vec<f32>,
    /// The absorbed sequences' weighted latents, in their order, when some of the batch took
    /// the expanded path.
    packed: Vec<f32>,
    expanded: ExpandedScratch,
}

impl LatentScratch {
    fn reserve(&mut self, t: usize, heads: usize, m: &MlaConfig) {
        grow(&mut self.q_a, t * m.q_lora_rank.unwrap_or(0));
        grow(&mut self.q_a_normed, t * m.q_lora_rank.unwrap_or(0));
        grow(&mut self.q, t * heads * m.qk_head_dim());
        grow(&mut self.kv, t * m.cached_dim());
        grow(&mut self.latent, t * heads * m.kv_lora_rank);
        grow(&mut self.values, t * heads * m.v_head_dim);
    }
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

pub(crate) struct LatentAttention {
    norm: BlockNorm,
    q: QueryProj,
    kv_a: Linear,
    kv_norm: RmsNorm,
    /// `kv_b`'s key part, per head transposed: `[heads, kv_lora_rank, qk_nope_head_dim]`.
    k_b: Vec<f32>,
    /// `kv_b`'s value part: `[heads, v_head_dim, kv_lora_rank]`.
    v_b: Vec<f32>,
    /// `kv_b` whole, `[heads · (nope + value), kv_lora_rank]`, for the expanded path.
    kv_b: Linear,
    /// Chunks of at least this many tokens take the expanded path.
    expanded_min_tokens: usize,
    o: Linear,
    rotary: Rotary,
    mla: MlaConfig,
    n_heads: usize,
}

impl LatentAttention {
    /// The projections, for [`Linear::share_buffer`].
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut out = match &mut self.q {
            QueryProj::Direct(q) => vec![q],
            QueryProj::LowRank { a, b, .. } => vec![a, b],
        };
        out.push(&mut self.kv_a);
        out.push(&mut self.o);
        out
    }

    pub fn load(
        ld: &TensorLoader<'_>,
        i: usize,
        cfg: &ModelConfig,
        mla: &MlaConfig,
    ) -> Result<LatentAttention, ModelError> {
        let (h, nh, eps) = (cfg.hidden_size, cfg.n_heads, cfg.rms_norm_eps);
        let q_rows = nh * mla.qk_head_dim();
        let q = match mla.q_lora_rank {
            None => QueryProj::Direct(ld.linear(i, LayerTensor::Q, q_rows, h)?),
            Some(r) => QueryProj::LowRank {
                a: ld.linear(i, LayerTensor::QA, r, h)?,
                norm: ld.layer_norm(i, LayerTensor::QANorm, r, eps)?,
                b: ld.linear(i, LayerTensor::QB, q_rows, r)?,
            },
        };
        let (k_b, v_b) = load_kv_b(ld, i, nh, mla)?;
        let kv_b = whole_kv_b(ld, i, nh, mla, &k_b, &v_b)?;
        let layout = cfg.architecture.layout();
        Ok(LatentAttention {
            norm: ld.layer_block_norm(i, LayerTensor::AttnNorm, h, eps, layout.norm)?,
            q,
            kv_a: ld.linear(i, LayerTensor::KvA, mla.cached_dim(), h)?,
            kv_norm: ld.layer_norm(i, LayerTensor::KvANorm, mla.kv_lora_rank, eps)?,
            k_b,
            v_b,
            kv_b,
            expanded_min_tokens: EXPANDED_PREFILL_MIN_TOKENS,
            o: ld.linear(i, LayerTensor::O, h, nh * mla.v_head_dim)?,
            rotary: Rotary::new(cfg, RopeStyle::Interleaved),
            mla: mla.clone(),
            n_heads: nh,
        })
    }

    /// The stored bytes of the block's projections (`kv_b` per head as f32, and whole).
    pub fn weight_bytes(&self) -> usize {
        let q = match &self.q {
            QueryProj::Direct(q) => q.n_bytes(),
            QueryProj::LowRank { a, b, .. } => a.n_bytes() + b.n_bytes(),
        };
        let kv_b = 4 * (self.k_b.len() + self.v_b.len()) + self.kv_b.n_bytes();
        q + self.kv_a.n_bytes() + self.o.n_bytes() + kv_b
    }

    /// Chunks of at least `n` tokens take the expanded path (`usize::MAX`: none).
    pub fn set_expanded_min_tokens(&mut self, n: usize) {
        self.expanded_min_tokens = n;
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
        let t = batch.num_tokens();
        let n = t * d.hidden;
        let ws = &mut *pass.ws;
        ws.mla.reserve(t, self.n_heads, &self.mla);
        zip_rows(pool, &mut ws.h[..n], &ws.x[..n], d.hidden, &|h, x| {
            self.norm.forward(x, h)
        });
        observer.observe(l, LinearSite::Qkv, &ws.h[..n], t);
        self.project(pool, t, ws);
        self.store(l, pass);
        let expanded: Vec<bool> = batch
            .seqs
            .iter()
            .map(|s| ExpandedPrefill::takes(s.tokens.len(), s.start_pos, self.expanded_min_tokens))
            .collect();
        self.absorbed(l, pass, &expanded);
        self.expanded(l, pass, &expanded);
        let ws = &mut *pass.ws;
        let vd = self.n_heads * self.mla.v_head_dim;
        observer.observe(l, LinearSite::O, &ws.mla.values[..t * vd], t);
        self.o
            .forward(pool, &ws.mla.values, t, &mut ws.h, &mut ws.scratch);
        zip_rows(pool, &mut ws.x[..n], &ws.h[..n], d.hidden, &|x, y| {
            add_assign(x, y)
        });
    }

    /// Queries into `ws.mla.q`; cached rows `[norm(latent) | rotated key]` into `ws.mla.kv`.
    fn project(&self, pool: &ThreadPool, t: usize, ws: &mut Workspace) {
        let s = &mut ws.mla;
        match &self.q {
            QueryProj::Direct(q) => q.forward(pool, &ws.h, t, &mut s.q, &mut ws.scratch),
            QueryProj::LowRank { a, norm, b } => {
                a.forward(pool, &ws.h, t, &mut s.q_a, &mut ws.scratch);
                let r = a.rows();
                norm.forward(&s.q_a[..t * r], &mut s.q_a_normed[..t * r]);
                b.forward(pool, &s.q_a_normed, t, &mut s.q, &mut ws.scratch);
            }
        }
        self.kv_a
            .forward(pool, &ws.h, t, &mut s.kv, &mut ws.scratch);
        let (c, rope) = (self.mla.kv_lora_rank, self.mla.qk_rope_head_dim);
        let width = c + rope;
        let positions = &ws.positions[..t];
        pool.for_rows(
            &mut s.kv[..t * width],
            width,
            PARALLEL_ROWS,
            &|first, rows| {
                let mut normed = vec![0.0; c];
                for (row, &pos) in rows.chunks_exact_mut(width).zip(&positions[first..]) {
                    self.kv_norm.forward(&row[..c], &mut normed);
                    row[..c].copy_from_slice(&normed);
                    self.rotary.apply(&mut row[c..], rope, pos);
                }
            },
        );
    }

    /// The sequences not `expanded`: absorbed queries, latent attention and the value
    /// projection, into `ws.mla.values` at their tokens.
    fn absorbed(&self, l: usize, pass: &mut Pass<'_>, expanded: &[bool]) {
        let spans = spans(pass, expanded, false);
        if spans.is_empty() {
            return;
        }
        let pool = pass.pool;
        for &(t0, n) in &spans {
            self.absorb_queries(pool, t0..t0 + n, pass.ws);
        }
        self.attend(l, pass, expanded);
        let ws = &mut *pass.ws;
        if expanded.iter().any(|&e| e) {
            let row = self.n_heads * self.mla.kv_lora_rank;
            let mut from = 0;
            for &(t0, n) in &spans {
                ws.mla.latent[t0 * row..(t0 + n) * row]
                    .copy_from_slice(&ws.mla.packed[from * row..(from + n) * row]);
                from += n;
            }
        }
        for &(t0, n) in &spans {
            self.expand_values(pool, t0..t0 + n, ws);
        }
    }

    /// The `expanded` sequences, one at a time, into `ws.mla.values` at their tokens.
    fn expanded(&self, l: usize, pass: &mut Pass<'_>, expanded: &[bool]) {
        let path = ExpandedPrefill {
            kv_b: &self.kv_b,
            rotary: &self.rotary,
            mla: &self.mla,
            n_heads: self.n_heads,
        };
        let (qk, vd) = (
            self.n_heads * self.mla.qk_head_dim(),
            self.n_heads * self.mla.v_head_dim,
        );
        let mut offset = 0;
        for (s, &e) in pass.batch.seqs.iter().zip(expanded) {
            let n = s.tokens.len();
            if e {
                let ws = &mut *pass.ws;
                let chunk = Chunk {
                    q: &ws.mla.q[offset * qk..(offset + n) * qk],
                    start_pos: s.start_pos,
                    n,
                    positions: &ws.positions[offset..offset + n],
                    block_table: &s.block_table,
                };
                let values = &mut ws.mla.values[offset * vd..(offset + n) * vd];
                let latents = pass.kv.layer(l);
                let (ex, scratch) = (&mut ws.mla.expanded, &mut ws.scratch);
                path.run(pass.pool, &latents, &chunk, ex, scratch, values);
            }
            offset += n;
        }
    }

    /// Every head's absorbed query `[W_ukᵀ q_nope | rotated q_rope]` of the tokens `range`
    /// into `ws.q`.
    fn absorb_queries(&self, pool: &ThreadPool, range: std::ops::Range<usize>, ws: &mut Workspace) {
        let m = &self.mla;
        let (nope, rope, c) = (m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank);
        let (qk, row) = (m.qk_head_dim(), m.cached_dim());
        let width = self.n_heads * row;
        let (raw, positions) = (&ws.mla.q, &ws.positions[..range.end]);
        let out = &mut ws.q[range.start * width..range.end * width];
        // One (token, head) pair a row: a decode step's heads spread over the threads.
        pool.for_rows(out, row, 1, &|first, rows| {
            for (i, o) in rows.chunks_exact_mut(row).enumerate() {
                let (token, h) = pair(range.start * self.n_heads + first + i, self.n_heads);
                let q = &raw[(token * self.n_heads + h) * qk..][..qk];
                let k_b = &self.k_b[h * c * nope..][..c * nope];
                for (v, w) in o[..c].iter_mut().zip(k_b.chunks_exact(nope)) {
                    *v = dot(w, &q[..nope]);
                }
                o[c..].copy_from_slice(&q[nope..]);
                self.rotary.apply(&mut o[c..], rope, positions[token]);
            }
        });
    }

    /// Write the batch's cached rows into layer `l`'s cache blocks.
    fn store(&self, l: usize, pass: &mut Pass<'_>) {
        let t = pass.batch.num_tokens();
        let rows = &pass.ws.mla.kv[..t * self.mla.cached_dim()];
        let writes = pass.batch.seqs.iter().map(|s| KvWrite {
            block_table: &s.block_table,
            start_pos: s.start_pos,
            n: s.tokens.len(),
        });
        store_latent_many(&mut pass.kv.layer_mut(l), writes, rows);
    }

    /// Every query head's weighted latent of the sequences not `expanded`: into
    /// `ws.mla.latent` when that is all of them, else packed (in order) into `ws.mla.packed`.
    fn attend(&self, l: usize, pass: &mut Pass<'_>, expanded: &[bool]) {
        let ws = &mut *pass.ws;
        let qd = self.n_heads * self.mla.cached_dim();
        let mut offset = 0;
        let mut seqs = Vec::with_capacity(pass.batch.seqs.len());
        for (s, &e) in pass.batch.seqs.iter().zip(expanded) {
            let n = s.tokens.len();
            if !e {
                seqs.push(kestrel_kernels::cpu::attention::AttnSeq {
                    q: &ws.q[offset * qd..(offset + n) * qd],
                    n_q: n,
                    q_start_pos: s.start_pos,
                    block_table: &s.block_table,
                });
            }
            offset += n;
        }
        let params = LatentParams {
            n_heads: self.n_heads,
            scale: self.mla.softmax_scale,
            value_dim: self.mla.kv_lora_rank,
        };
        let t: usize = seqs.iter().map(|s| s.n_q).sum();
        let len = t * self.n_heads * self.mla.kv_lora_rank;
        let out = match expanded.iter().any(|&e| e) {
            false => &mut ws.mla.latent[..len],
            true => {
                grow(&mut ws.mla.packed, len);
                &mut ws.mla.packed[..len]
            }
        };
        latent_attention(pass.pool, &pass.kv.layer(l), &seqs, params, out);
    }

    /// Every head's value `W_uv_h · latent_h` of the tokens `range`, into `ws.mla.values`.
    fn expand_values(&self, pool: &ThreadPool, range: std::ops::Range<usize>, ws: &mut Workspace) {
        let (c, vd) = (self.mla.kv_lora_rank, self.mla.v_head_dim);
        let width = self.n_heads * vd;
        let latent = &ws.mla.latent;
        let out = &mut ws.mla.values[range.start * width..range.end * width];
        // One (token, head) pair a row, as in `absorb_queries`.
        pool.for_rows(out, vd, 1, &|first, rows| {
            for (i, o) in rows.chunks_exact_mut(vd).enumerate() {
                let (token, h) = pair(range.start * self.n_heads + first + i, self.n_heads);
                let x = &latent[(token * self.n_heads + h) * c..][..c];
                let w = &self.v_b[h * vd * c..][..vd * c];
                for (v, wr) in o.iter_mut().zip(w.chunks_exact(c)) {
                    *v = dot(wr, x);
                }
            }
        });
    }
}

/// `(first token, tokens)` of the runs of consecutive sequences whose `expanded` flag is
/// `want` (one run for the whole batch when every flag is).
fn spans(pass: &Pass<'_>, expanded: &[bool], want: bool) -> Vec<(usize, usize)> {
    let mut offset = 0;
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (s, &e) in pass.batch.seqs.iter().zip(expanded) {
        let n = s.tokens.len();
        if e == want {
            match out.last_mut() {
                Some((t0, len)) if *t0 + *len == offset => *len += n,
                _ => out.push((offset, n)),
            }
        }
        offset += n;
    }
    out
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent partial sums, so the compiler keeps them in vector lanes (one
    // serial sum cannot be reordered into lanes).
    const L: usize = 8;
    let n = a.len().min(b.len());
    let mut acc = [0.0f32; L];
    for (x, y) in a[..n].chunks_exact(L).zip(b[..n].chunks_exact(L)) {
        for l in 0..L {
            acc[l] += x[l] * y[l];
        }
    }
    let tail = n - n % L;
    let rest: f32 = a[tail..n].iter().zip(&b[tail..n]).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + rest
}

/// The token and head of the `index`-th (token, head) row of a layout of `heads` rows a
/// token.
fn pair(index: usize, heads: usize) -> (usize, usize) {
    (index / heads, index % heads)
}

/// `kv_b`'s key and value parts of layer `i` in the layout of [`LatentAttention`]: from the
/// split `attn_k_b` / `attn_v_b` of newer GGUF files, or from the one `kv_b` (HF, older GGUF
/// files: `[heads · (nope + value), latent]`).
fn load_kv_b(
    ld: &TensorLoader<'_>,
    i: usize,
    nh: usize,
    m: &MlaConfig,
) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
    let (c, nope, vd) = (m.kv_lora_rank, m.qk_nope_head_dim, m.v_head_dim);
    let k_name = ld.naming.layer(i, LayerTensor::KB, "weight");
    if ld.has(&k_name) {
        let k_b = to_f32_vec(&ld.get(&k_name, &[nh, c, nope])?)?;
        let v_name = ld.naming.layer(i, LayerTensor::VB, "weight");
        let v_b = to_f32_vec(&ld.get(&v_name, &[nh, vd, c])?)?;
        return Ok((k_b, v_b));
    }
    let name = ld.naming.layer(i, LayerTensor::KvB, "weight");
    let kv_b = to_f32_vec(&ld.get(&name, &[nh * (nope + vd), c])?)?;
    let (mut k_b, mut v_b) = (vec![0.0; nh * c * nope], Vec::with_capacity(nh * vd * c));
    for (h, head) in kv_b.chunks_exact((nope + vd) * c).enumerate() {
        let (k, v) = head.split_at(nope * c);
        for (r, row) in k.chunks_exact(c).enumerate() {
            for (j, &w) in row.iter().enumerate() {
                k_b[(h * c + j) * nope + r] = w;
            }
        }
        v_b.extend_from_slice(v);
    }
    Ok((k_b, v_b))
}

/// `kv_b` whole, `[heads · (nope + value), latent]` (each head's nope rows, then its value
/// rows), in the file's own type: its `kv_b` tensor when it has one; else rebuilt from the
/// split `attn_k_b` (`[heads, latent, nope]`, transposed per head) and `attn_v_b`
/// (`[heads, value, latent]`) when both are one float type (F32, F16, BF16: a transposition
/// moves whole elements); f32 from the loaded parts otherwise (a quantized `attn_k_b`'s blocks
/// run along `nope`, and its transposition would have to be requantized).
fn whole_kv_b(
    ld: &TensorLoader<'_>,
    i: usize,
    nh: usize,
    m: &MlaConfig,
    k_b: &[f32],
    v_b: &[f32],
) -> Result<Linear, ModelError> {
    let (c, nope, vd) = (m.kv_lora_rank, m.qk_nope_head_dim, m.v_head_dim);
    let rows = nh * (nope + vd);
    let name = ld.naming.layer(i, LayerTensor::KvB, "weight");
    if ld.has(&name) {
        return ld.linear(i, LayerTensor::KvB, rows, c);
    }
    let k = ld.get(
        &ld.naming.layer(i, LayerTensor::KB, "weight"),
        &[nh, c, nope],
    )?;
    let v = ld.get(&ld.naming.layer(i, LayerTensor::VB, "weight"), &[nh, vd, c])?;
    let (dtype, data) = match (k.dtype, v.dtype) {
        (DType::F32 | DType::F16 | DType::BF16, dv) if dv == k.dtype => {
            let size = match k.dtype {
                DType::F32 => 4,
                _ => 2,
            };
            let bytes = interleave_heads(&k.data, &v.data, size, [nh, c, nope, vd]);
            (k.dtype, SharedBytes::from_vec(bytes))
        }
        _ => {
            let values = interleave_heads_f32(k_b, v_b, [nh, c, nope, vd]);
            (DType::F32, SharedBytes::from_f32(&values))
        }
    };
    let view = TensorView {
        name,
        dtype,
        shape: vec![rows, c],
        data,
    };
    Ok(Linear::new(view, None)?.packed())
}

/// Per head: `k` (`[latent, nope]`) transposed, then `v` (`[value, latent]`) as it is;
/// elements of `size` bytes.
fn interleave_heads(k: &[u8], v: &[u8], size: usize, [nh, c, nope, vd]: [usize; 4]) -> Vec<u8> {
    let mut out = Vec::with_capacity(nh * (nope + vd) * c * size);
    for h in 0..nh {
        let kh = &k[h * c * nope * size..][..c * nope * size];
        for r in 0..nope {
            for j in 0..c {
                out.extend_from_slice(&kh[(j * nope + r) * size..][..size]);
            }
        }
        out.extend_from_slice(&v[h * vd * c * size..][..vd * c * size]);
    }
    out
}

fn interleave_heads_f32(k: &[f32], v: &[f32], [nh, c, nope, vd]: [usize; 4]) -> Vec<f32> {
    let mut out = Vec::with_capacity(nh * (nope + vd) * c);
    for h in 0..nh {
        let kh = &k[h * c * nope..][..c * nope];
        for r in 0..nope {
            out.extend((0..c).map(|j| kh[j * nope + r]));
        }
        out.extend_from_slice(&v[h * vd * c..][..vd * c]);
    }
    out
}
