//! Multi-head latent attention (DeepSeek V2/V3) over a paged cache of one "head": every token
//! stores one key row `[c | k_rope]` — the compressed latent `c` (`value_dim` values) and the
//! decoupled rotary key — and nothing else. Values are the latent itself, a prefix view of
//! the key row, so the cache has no value array.
//!
//! The queries come already absorbed (`[W_ukᵀ q_nope | q_rope]` per head, `head_dim` values),
//! so each head's score is a plain dot product with the key row and its output is the
//! softmax-weighted sum of latents, `value_dim` values per head; the caller applies each head's
//! value projection afterwards. Every query head reads the same key rows (MQA with one kv
//! head), so a thread handles consecutive (query, head) rows and decodes each key tile once for
//! all the heads of one query it holds.
//!
//! Keys use the layout of the other paths ([`KeyTile`]: per block, dimension-major), so the
//! cache's storage formats, block copies and prefix sharing apply unchanged. Per (query, head)
//! the walk is an online softmax over blocks in position order:
//!
//! ```text
//!   s_j = scale · q · key_j             (j ≤ query position)
//!   out = Σ_j e^(s_j − m) c_j / Σ_j e^(s_j − m),   c_j = key_j[..value_dim]
//! ```
//!
//! The loops are written over whole tiles (one dimension of `block_size` keys at a time).
//! This file is the kernel's spec: [`one_query`] is the scalar reference; the SIMD variants
//! ([`super::latent_lanes`]: the same walk with lane-structured vector math and F16C tile
//! decoding, compiled for AVX2 and AVX-512) are chosen once per call by [`Isa`] and tested
//! against it.

use std::cell::RefCell;

use super::key_tile::KeyTile;
use super::latent_lanes;
use super::{AttnSeq, KvDtype, KvWrite, PagedKv, PagedKvMut};
use crate::cpu::{Isa, ThreadPool};

/// Rows (query × head) below which the calling thread runs alone.
const PARALLEL_ROWS: usize = 4;

/// Head count, score scale and the latent (value) width of [`latent_attention`].
#[derive(Debug, Clone, Copy)]
pub struct LatentParams {
    pub n_heads: usize,
    pub scale: f32,
    /// The leading key dimensions that are also the value (`kv_lora_rank`).
    pub value_dim: usize,
}

/// Writes token `i` of the batch (counting through `writes`) as key row `rows[i]` (`head_dim`
/// values) into the one-head cache `kv`; its value array is not used.
pub fn store_latent_many<'a>(
    kv: &mut PagedKvMut<'_>,
    writes: impl Iterator<Item = KvWrite<'a>>,
    rows: &[f32],
) {
    assert_eq!(kv.n_kv_heads, 1, "latent cache: one head");
    let (hd, bs) = (kv.head_dim, kv.block_size);
    let tile = kv.as_ref().key_tile();
    let mut enc = vec![0u8; kv.dtype.row_bytes(hd)];
    let mut src = rows.chunks_exact(hd);
    for w in writes {
        for pos in w.start_pos..w.start_pos + w.n {
            let row = src.next().expect("store_latent_many: a row per token");
            kv.dtype.encode_row(row, &mut enc);
            let at = tile.offset(w.block_table[pos / bs] as usize, 0, 1);
            tile.scatter(&enc, pos % bs, &mut kv.k[at..at + tile.bytes()]);
        }
    }
}

/// Latent attention of every query of every sequence (see the module docs): `seqs[i].q` holds
/// `n_q × n_heads × head_dim` absorbed queries, `out` gets `n_heads × value_dim` per query,
/// sequences concatenated. Runs this CPU's best variant.
pub fn latent_attention(
    pool: &ThreadPool,
    kv: &PagedKv<'_>,
    seqs: &[AttnSeq<'_>],
    p: LatentParams,
    out: &mut [f32],
) {
    latent_attention_with(Isa::detected(), pool, kv, seqs, p, out)
}

/// One query position's heads, walked over the cache into `out` (`heads × value_dim`): the
/// reference [`one_query`] or a SIMD variant of it.
pub(super) type QueryFn = fn(&PagedKv<'_>, &LatentParams, &Query<'_>, &mut [f32], &mut Vec<f32>);

/// [`latent_attention`] with the variant for `isa` (capped at what this CPU supports;
/// `Isa::Scalar` is the reference).
pub fn latent_attention_with(
    isa: Isa,
    pool: &ThreadPool,
    kv: &PagedKv<'_>,
    seqs: &[AttnSeq<'_>],
    p: LatentParams,
    out: &mut [f32],
) {
    assert_eq!(kv.n_kv_heads, 1, "latent cache: one head");
    assert!(p.value_dim <= kv.head_dim, "latent wider than the key row");
    let tokens: usize = seqs.iter().map(|s| s.n_q).sum();
    assert_eq!(out.len(), tokens * p.n_heads * p.value_dim, "output size");
    for s in seqs {
        assert_eq!(s.q.len(), s.n_q * p.n_heads * kv.head_dim, "query size");
    }
    let run = query_fn(isa);
    pool.for_rows(out, p.value_dim, PARALLEL_ROWS, &|first, part| {
        thread_local! {
            static BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
        }
        BUF.with_borrow_mut(|buf| rows(kv, seqs, &p, first, part, buf, run));
    });
}

fn query_fn(isa: Isa) -> QueryFn {
    match isa.min(Isa::supported()) {
        Isa::Scalar => one_query,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => latent_lanes::one_query_avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => latent_lanes::one_query_avx512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => one_query,
    }
}

/// The output rows `first..` (`part`, `value_dim` each) — (query, head) pairs in order — one
/// query's run of heads at a time.
fn rows(
    kv: &PagedKv<'_>,
    seqs: &[AttnSeq<'_>],
    p: &LatentParams,
    first: usize,
    part: &mut [f32],
    buf: &mut Vec<f32>,
    run: QueryFn,
) {
    let n_rows = part.len() / p.value_dim;
    let mut r = first;
    while r < first + n_rows {
        let (token, head) = (r / p.n_heads, r % p.n_heads);
        let heads = (p.n_heads - head).min(first + n_rows - r);
        let (seq, i) = locate(seqs, token);
        let q = &seq.q[(i * p.n_heads + head) * kv.head_dim..][..heads * kv.head_dim];
        let o = &mut part[(r - first) * p.value_dim..][..heads * p.value_dim];
        let query = Query {
            q,
            pos: seq.q_start_pos + i,
            block_table: seq.block_table,
        };
        run(kv, p, &query, o, buf);
        r += heads;
    }
}

/// The sequence holding batch token `token`, and the token's index in it.
fn locate<'s, 'a>(seqs: &'s [AttnSeq<'a>], mut token: usize) -> (&'s AttnSeq<'a>, usize) {
    for s in seqs {
        if token < s.n_q {
            return (s, token);
        }
        token -= s.n_q;
    }
    unreachable!("the output has one row per query")
}

/// One query position's heads.
pub(super) struct Query<'a> {
    /// `heads × head_dim` absorbed queries.
    pub q: &'a [f32],
    pub pos: usize,
    pub block_table: &'a [u32],
}

/// A query's working space, cut from one reused buffer: the decoded key tile (`head_dim ×
/// block_size`), the block's scores, and per head the running max (starting at -inf) and
/// denominator.
pub(super) struct Scratch<'b> {
    pub keys: &'b mut [f32],
    pub scores: &'b mut [f32],
    pub max: &'b mut [f32],
    pub sum: &'b mut [f32],
}

impl<'b> Scratch<'b> {
    pub(super) fn new(buf: &'b mut Vec<f32>, hd: usize, bs: usize, heads: usize) -> Self {
        buf.clear();
        buf.resize(hd * bs + bs + 2 * heads, 0.0);
        let (keys, rest) = buf.split_at_mut(hd * bs);
        let (scores, stats) = rest.split_at_mut(bs);
        let (max, sum) = stats.split_at_mut(heads);
        max.fill(f32::NEG_INFINITY);
        Scratch {
            keys,
            scores,
            max,
            sum,
        }
    }
}

/// The online softmax of `query`'s heads over keys `0..=pos`, into `out` (`heads ×
/// value_dim`). `buf` holds the decoded tile, the block's scores, and per head its running
/// max and denominator. The reference variant.
fn one_query(
    kv: &PagedKv<'_>,
    p: &LatentParams,
    query: &Query<'_>,
    out: &mut [f32],
    buf: &mut Vec<f32>,
) {
    let (hd, bs, vd) = (kv.head_dim, kv.block_size, p.value_dim);
    let heads = query.q.len() / hd;
    let Scratch {
        keys,
        scores,
        max,
        sum,
    } = Scratch::new(buf, hd, bs, heads);
    out.fill(0.0);
    let tile = kv.key_tile();
    for b in 0..=query.pos / bs {
        let n = (query.pos + 1 - b * bs).min(bs);
        let at = tile.offset(query.block_table[b] as usize, 0, 1);
        decode_tile(&tile, &kv.k[at..at + tile.bytes()], keys);
        for h in 0..heads {
            let q = &query.q[h * hd..][..hd];
            score(q, keys, bs, &mut scores[..n]);
            scores[..n].iter_mut().for_each(|s| *s *= p.scale);
            let acc = &mut out[h * vd..][..vd];
            update(&mut scores[..n], (&mut max[h], &mut sum[h]), acc);
            accumulate(&scores[..n], keys, bs, acc);
        }
    }
    for (h, &l) in sum.iter().enumerate() {
        out[h * vd..][..vd].iter_mut().for_each(|v| *v /= l);
    }
}

/// `scores[j] = q · key_j` for the block's first `scores.len()` slots (`keys` dimension-major,
/// `bs` per dimension).
fn score(q: &[f32], keys: &[f32], bs: usize, scores: &mut [f32]) {
    let n = scores.len();
    scores.fill(0.0);
    for (d, &qd) in q.iter().enumerate() {
        let col = &keys[d * bs..][..n];
        scores.iter_mut().zip(col).for_each(|(s, k)| *s += qd * k);
    }
}

/// The online-softmax step: rescale the running state to the new max, turn `scores` into
/// their exponentials and add them to the denominator.
fn update(scores: &mut [f32], (max, sum): (&mut f32, &mut f32), acc: &mut [f32]) {
    let block_max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let m = max.max(block_max);
    let corr = (*max - m).exp();
    if corr != 1.0 {
        acc.iter_mut().for_each(|a| *a *= corr);
        *sum *= corr;
    }
    *max = m;
    scores.iter_mut().for_each(|s| *s = (*s - m).exp());
    *sum += scores.iter().sum::<f32>();
}

/// `acc[d] += Σ_j w_j · key_j[d]` for the latent dimensions `d < acc.len()`.
fn accumulate(weights: &[f32], keys: &[f32], bs: usize, acc: &mut [f32]) {
    let n = weights.len();
    for (d, a) in acc.iter_mut().enumerate() {
        let col = &keys[d * bs..][..n];
        *a += col.iter().zip(weights).map(|(k, w)| k * w).sum::<f32>();
    }
}

/// A key tile's values as f32, dimension-major (`head_dim × block_size`; q8 scales applied).
pub(super) fn decode_tile(tile: &KeyTile, bytes: &[u8], keys: &mut [f32]) {
    let bs = tile.block_size;
    let values = &bytes[tile.value_at(0, 0)..];
    match tile.dtype {
        KvDtype::F32 => {
            for (k, b) in keys.iter_mut().zip(values.chunks_exact(4)) {
                *k = f32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        KvDtype::F16 => {
            for (k, b) in keys.iter_mut().zip(values.chunks_exact(2)) {
                *k = half::f16::from_bits(u16::from_ne_bytes([b[0], b[1]])).to_f32();
            }
        }
        KvDtype::Q8 => {
            let scale = |slot: usize| {
                let s = &bytes[tile.header_at(slot)..][..4];
                f32::from_ne_bytes([s[0], s[1], s[2], s[3]])
            };
            for (d, col) in keys.chunks_exact_mut(bs).enumerate() {
                for (slot, k) in col.iter_mut().enumerate() {
                    *k = (values[d * bs + slot] as i8) as f32 * scale(slot);
                }
            }
        }
    }
}
