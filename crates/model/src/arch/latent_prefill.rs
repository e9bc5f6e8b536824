//! [`ExpandedPrefill`]: multi-head latent attention for a long prefill chunk without the
//! absorbed queries — the cached latent rows are expanded through `kv_b` into every head's key
//! (nope part) and value, and the ordinary tiled attention runs on them, as DeepSeek's
//! reference and vLLM do for prefill:
//!
//! ```text
//!   cached row j   = [c_j (latent) | k_rope_j]                         (the KV cache, unchanged)
//!   [k_nope_hj | v_hj] = kv_b_h · c_j                                  (one GEMM per 256 keys)
//!   K_hj = [k_nope_hj | k_rope_j]     V_hj = [v_hj | 0 … 0]            (a scratch f32 paged cache,
//!   Q_hi = [q_nope_hi | rope(q_rope_hi)]                                 qk_head_dim wide)
//!   out_hi = softmax_j(scale · Q_hi · K_hj) V_hj   → its first v_head_dim values are the value
//! ```
//!
//! Per (query, key, head) that is `qk_head_dim` multiply-adds for the score and as many for
//! the weighted value (192 + 192 on V2-Lite, the value padded to the key width because the
//! tiled kernel takes one head width), against `kv_lora_rank + qk_rope_head_dim` and
//! `kv_lora_rank` (576 + 512) in the absorbed form. The price is the expansion: every key of
//! the context (cached ones included) goes through `kv_b` once per chunk, `heads ·
//! (nope + value) · kv_lora_rank` multiply-adds per key. The absorbed form also pays
//! `heads · kv_lora_rank · (nope + value)` per query for the query absorption and the value
//! projection, which this form skips, so a chunk of `n` queries over `L` keys gains when `n`
//! is more than a few tokens: see [`EXPANDED_PREFILL_MIN_TOKENS`].
//!
//! The expanded keys and values live only for the layer's call; the KV cache keeps the latent
//! rows, so decode and prefix caching see the same cache whichever path a chunk took.

use kestrel_kernels::cpu::attention::{
    attention, store_kv_many, AttnSeq, KvDtype, KvWrite, PagedKvMut,
};
use kestrel_kernels::cpu::threadpool::ThreadPool;

use crate::config::MlaConfig;
use crate::layers::{Linear, Rotary};

/// Chunks of at least this many new tokens take the expanded path; shorter ones (decode,
/// speculative verification, short prompt tails) the absorbed one. Chosen by counting
/// multiply-adds on V2-Lite's sizes, not yet by timing: a chunk of `n` queries over `L` keys
/// saves about `n · L · heads · 704 / 2` (causal) plus `n · 2.1 M` (absorption and value
/// projection) and pays `L · 2.1 M` for the expansion (as a GEMM), so a chunk with no cached
/// prefix gains from a handful of tokens and a chunk after a long prefix from about 200;
/// 32 keeps decode, speculative verification and short tails absorbed.
pub const EXPANDED_PREFILL_MIN_TOKENS: usize = 32;

/// A chunk whose context (cached and new keys) is longer than this takes the absorbed path
/// even when long: the scratch keys and values take `2 · heads · qk_head_dim · 4` bytes per
/// key (24 KiB on V2-Lite, 96 MiB at 4096 keys).
pub const EXPANDED_PREFILL_MAX_CONTEXT: usize = 16384;

/// Keys expanded per `kv_b` product.
const EXPAND_ROWS: usize = 256;
/// Token slots per block of the scratch cache.
const BLOCK: usize = 16;

/// The buffers of the expanded path, reused across layers and passes.
#[derive(Debug, Default)]
pub struct ExpandedScratch {
    /// Cached rows `[latent | rope key]` of up to [`EXPAND_ROWS`] keys.
    rows: Vec<f32>,
    /// Their latents alone, `[keys, kv_lora_rank]`.
    latent: Vec<f32>,
    /// `kv_b` of the latents, `[keys, heads · (nope + value)]`.
    up: Vec<f32>,
    /// Keys and zero-padded values, `[keys, heads · qk_head_dim]`.
    k_rows: Vec<f32>,
    v_rows: Vec<f32>,
    /// The scratch paged cache (f32, blocks of [`BLOCK`], physical = logical).
    k_cache: Vec<u8>,
    v_cache: Vec<u8>,
    table: Vec<u32>,
    /// The chunk's queries with their rotary part applied, and the attention output.
    q: Vec<f32>,
    out: Vec<f32>,
}

/// One sequence's chunk for [`ExpandedPrefill::run`].
pub struct Chunk<'a> {
    /// Every head's raw `[nope | rope]` query of the chunk's tokens, `[n, heads · qk_head_dim]`.
    pub q: &'a [f32],
    /// The chunk's positions: `start_pos .. start_pos + n`.
    pub start_pos: usize,
    pub n: usize,
    pub positions: &'a [usize],
    pub block_table: &'a [u32],
}

/// The weights and sizes the expanded path reads.
pub struct ExpandedPrefill<'a> {
    /// `kv_b`: `[heads · (nope + value), kv_lora_rank]`, each head's nope rows then its value
    /// rows.
    pub kv_b: &'a Linear,
    pub rotary: &'a Rotary,
    pub mla: &'a MlaConfig,
    pub n_heads: usize,
}

impl ExpandedPrefill<'_> {
    /// Whether a chunk of `n` new tokens after `start_pos` cached ones takes this path.
    pub fn takes(n: usize, start_pos: usize, min_tokens: usize) -> bool {
        n >= min_tokens && start_pos + n <= EXPANDED_PREFILL_MAX_CONTEXT
    }

    /// The chunk's values, `[n, heads · v_head_dim]`, into `values`; the cache (`latents`,
    /// one head of `[latent | rope key]` rows) must hold every position up to the chunk's end.
    pub fn run(
        &self,
        pool: &ThreadPool,
        latents: &kestrel_kernels::cpu::attention::PagedKv<'_>,
        chunk: &Chunk<'_>,
        s: &mut ExpandedScratch,
        scratch: &mut kestrel_kernels::cpu::gemm::Scratch,
        values: &mut [f32],
    ) {
        let m = self.mla;
        let (heads, qk) = (self.n_heads, m.qk_head_dim());
        let keys = chunk.start_pos + chunk.n;
        let blocks = keys.div_ceil(BLOCK);
        let bytes = blocks * BLOCK * heads * KvDtype::F32.row_bytes(qk);
        resize(&mut s.k_cache, bytes);
        resize(&mut s.v_cache, bytes);
        s.table.clear();
        s.table.extend(0..blocks as u32);
        let mut cache = PagedKvMut {
            k: &mut s.k_cache[..bytes],
            v: &mut s.v_cache[..bytes],
            dtype: KvDtype::F32,
            block_size: BLOCK,
            n_kv_heads: heads,
            head_dim: qk,
        };
        let mut p0 = 0;
        while p0 < keys {
            let p1 = (p0 + EXPAND_ROWS).min(keys);
            let b = Buffers {
                rows: &mut s.rows,
                latent: &mut s.latent,
                up: &mut s.up,
                k_rows: &mut s.k_rows,
                v_rows: &mut s.v_rows,
            };
            self.expand(pool, latents, chunk.block_table, p0..p1, b, scratch);
            let write = KvWrite {
                block_table: &s.table,
                start_pos: p0,
                n: p1 - p0,
            };
            let width = (p1 - p0) * heads * qk;
            store_kv_many(
                pool,
                &mut cache,
                std::iter::once(write),
                &s.k_rows[..width],
                &s.v_rows[..width],
            );
            p0 = p1;
        }
        self.queries(chunk, &mut s.q);
        resize(&mut s.out, chunk.n * heads * qk);
        let seq = AttnSeq {
            q: &s.q[..chunk.n * heads * qk],
            n_q: chunk.n,
            q_start_pos: chunk.start_pos,
            block_table: &s.table,
        };
        let out = &mut s.out[..chunk.n * heads * qk];
        attention(
            pool,
            &cache.as_ref(),
            &[seq],
            heads,
            m.softmax_scale,
            None,
            out,
        );
        let vd = m.v_head_dim;
        for (dst, src) in values[..chunk.n * heads * vd]
            .chunks_exact_mut(vd)
            .zip(out.chunks_exact(qk))
        {
            dst.copy_from_slice(&src[..vd]);
        }
    }

    /// Keys and zero-padded values of positions `range` into `b.k_rows` / `b.v_rows`.
    fn expand(
        &self,
        pool: &ThreadPool,
        latents: &kestrel_kernels::cpu::attention::PagedKv<'_>,
        block_table: &[u32],
        range: std::ops::Range<usize>,
        b: Buffers<'_>,
        scratch: &mut kestrel_kernels::cpu::gemm::Scratch,
    ) {
        let m = self.mla;
        let (c, nope, vd, qk) = (
            m.kv_lora_rank,
            m.qk_nope_head_dim,
            m.v_head_dim,
            m.qk_head_dim(),
        );
        let (heads, row, rows) = (self.n_heads, m.cached_dim(), range.len());
        resize(b.rows, rows * row);
        latents.read_keys(block_table, range, 0, &mut b.rows[..rows * row]);
        resize(b.latent, rows * c);
        for (dst, src) in b.latent.chunks_exact_mut(c).zip(b.rows.chunks_exact(row)) {
            dst.copy_from_slice(&src[..c]);
        }
        let up_width = heads * (nope + vd);
        resize(b.up, rows * up_width);
        self.kv_b
            .forward(pool, &b.latent[..rows * c], rows, b.up, scratch);
        let width = heads * qk;
        resize(b.k_rows, rows * width);
        resize(b.v_rows, rows * width);
        let keys = b
            .k_rows
            .chunks_exact_mut(width)
            .zip(b.v_rows.chunks_exact_mut(width));
        for (j, (k, v)) in keys.take(rows).enumerate() {
            let up = &b.up[j * up_width..][..up_width];
            let rope = &b.rows[j * row + c..][..row - c];
            for h in 0..heads {
                let head = &up[h * (nope + vd)..][..nope + vd];
                let (kh, vh) = (&mut k[h * qk..][..qk], &mut v[h * qk..][..qk]);
                kh[..nope].copy_from_slice(&head[..nope]);
                kh[nope..].copy_from_slice(rope);
                vh[..vd].copy_from_slice(&head[nope..]);
                vh[vd..].fill(0.0);
            }
        }
    }

    /// The chunk's queries with the rotary part rotated, into `q`.
    fn queries(&self, chunk: &Chunk<'_>, q: &mut Vec<f32>) {
        let m = self.mla;
        let (qk, nope, rope) = (m.qk_head_dim(), m.qk_nope_head_dim, m.qk_rope_head_dim);
        let len = chunk.n * self.n_heads * qk;
        resize(q, len);
        q[..len].copy_from_slice(&chunk.q[..len]);
        let width = self.n_heads * qk;
        for (token, row) in q[..len].chunks_exact_mut(width).enumerate() {
            for head in row.chunks_exact_mut(qk) {
                self.rotary
                    .apply(&mut head[nope..], rope, chunk.positions[token]);
            }
        }
    }
}

/// The per-expansion buffers, borrowed apart from the scratch cache.
struct Buffers<'a> {
    rows: &'a mut Vec<f32>,
    latent: &'a mut Vec<f32>,
    up: &'a mut Vec<f32>,
    k_rows: &'a mut Vec<f32>,
    v_rows: &'a mut Vec<f32>,
}

fn resize<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}
