//! Causal attention over a paged KV cache, for a batch of sequences in one call.
//!
//! Cache layout per layer: `k` and `v` each hold `num_blocks` blocks of `block_size` token
//! slots × `n_kv_heads` head rows, every row `head_dim` values stored as [`KvDtype`] (`f32`,
//! `f16`, or `q8`: int8 with one f32 scale per row), i.e. `row_bytes =
//! dtype.row_bytes(head_dim)` bytes. A sequence's token at position `p` lives in physical
//! block `block_table[p / bs]`, slot `p % bs`. Value rows are stored per slot; keys are
//! stored per (block, kv head) tile, dimension-major ([`key_tile`]), so that one load gives
//! one dimension of consecutive keys:
//!
//! ```text
//!   block_table = [7, 2, 9]   (bs = 4)     value row of (p, kv head h) at byte
//!   pos:  0 1 2 3 | 4 5 6 7 | 8 9            ((block_table[p/bs]·bs + p%bs)·n_kv + h)·row_bytes
//!   blk:  7 7 7 7 | 2 2 2 2 | 9 9          key tile of (block b, kv head h) at byte
//!                                            (b·n_kv + h)·bs·row_bytes: bs headers, then
//!                                            hd rows of bs values
//! ```
//!
//! [`store_kv`] encodes on write. The kernel is tiled online softmax ("flash" attention): work
//! units are (sequence, kv head, tile of up to [`Q_TILE`] queries); a unit walks the cache one
//! block at a time, and all the query heads of its tile that share the kv head (GQA) score
//! against the block while it is in L1. Running max `m`, denominator `l` and the
//! unnormalized output are rescaled per block, so memory is O(tile) per thread, never
//! O(context). Units are handed out dynamically (an atomic counter) to balance causal
//! prefill tiles; a thread running a decode unit claims its next unit first and asks for
//! that unit's first blocks, so they arrive from memory while it computes.
//!
//! Long contexts are cut into key chunks ("split-K", flash-decoding; [`key_chunk`]): fixed
//! runs of [`KEY_CHUNK`] keys (whole blocks) aligned on absolute key positions. Every path
//! computes each chunk's online softmax from a fresh state and folds the chunks' partials
//! in chunk order with one merge function, then normalizes:
//!
//! ```text
//!   keys 0..=pos:   | chunk 0 | chunk 1 | chunk 2 (to pos) |
//!   decode units:   (seq, kv head, chunk 0) (seq, kv head, chunk 1) ...   any thread
//!                        └─ partial: acc, m, l ─┘ ... merged in chunk order by the caller
//!   tiled unit:     chunk 0 → running; chunk 1 fresh → merge; chunk 2 fresh → merge
//! ```
//!
//! A decode whose context spans several chunks thus runs as one unit per (sequence, kv head,
//! chunk), so a single long decode keeps every thread busy even with few kv heads (3 in
//! SmolLM2, 1 with MQA); its partials (`[acc | m | l]` per row) go to a scratch buffer that
//! the calling thread merges after the parallel part. Tiled units walk their chunks in turn
//! inside the unit. The chunks depend only on the block size, never on the thread count or
//! the batch, so a query's output stays the same whichever path, thread or batch computes
//! it; a context within one chunk is computed with exactly the operations of an unchunked
//! walk.
//!
//! A unit of one query (decode) scores whole registers of keys per multiply-add
//! (`decode`). A unit of several queries scores its rows (query × head) together as a small
//! matrix product with the rows in the SIMD lanes (`tiled`: `S = K · Qᵀ` by broadcast FMAs,
//! no horizontal sums), the softmax update is lane-wise over rows, and `acc = acc·corr +
//! P · V` is register-tiled (`tile`). Both paths do the same operations in the same order per
//! (query, head), so their outputs are bit-identical. f32 keys and values are read in place;
//! f16 and q8 ones are decoded once per (unit, block) to f32 (the q8 scales folded in) where
//! a path needs f32 rows. The kernels are monomorphized per storage format and ISA; the
//! portable path runs them on plain arrays.
//!
//! ALiBi models set [`AttnParams::alibi`]: every score of head `h` gets
//! `slope_h · (key_pos − query_pos)` added before the softmax ([`Alibi`]), from the absolute
//! positions the kernel already has, so paging, prefix caching and chunked prefill need
//! nothing more.

mod alibi;
mod block_softmax;
mod decode;
mod elem;
mod key_chunk;
mod key_tile;
pub mod kv_dtype;
mod lanes;
mod latent;
mod latent_lanes;
mod store;
mod tile;
mod tiled;

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use alibi::Alibi;
use elem::{F16Row, F32Row, KvElem, Q8Row};
pub use key_chunk::KEY_CHUNK;
use key_chunk::{KeyChunks, Partial};
use key_tile::KeyTile;
pub use kv_dtype::{KvDtype, ParseKvDtypeError};
use lanes::ScalarVec;
pub use latent::{latent_attention, latent_attention_with, store_latent_many, LatentParams};
pub use store::{store_kv, store_kv_many, KvWrite};

use crate::cpu::ops::simd_entry;
use crate::cpu::threadpool::SharedMut;
use crate::cpu::{Isa, ThreadPool};

/// Queries per work unit in prefill.
pub const Q_TILE: usize = 16;

/// One layer's KV cache, read-only: `k`/`v` hold `num_blocks · block_size · n_kv_heads` head
/// rows of `dtype.row_bytes(head_dim)` bytes each (see the module docs).
#[derive(Clone, Copy)]
pub struct PagedKv<'a> {
    pub k: &'a [u8],
    pub v: &'a [u8],
    pub dtype: KvDtype,
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// One layer's KV cache, writable (see [`store_kv`]).
pub struct PagedKvMut<'a> {
    pub k: &'a mut [u8],
    pub v: &'a mut [u8],
    pub dtype: KvDtype,
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl PagedKvMut<'_> {
    /// A read-only view.
    pub fn as_ref(&self) -> PagedKv<'_> {
        PagedKv {
            k: self.k,
            v: self.v,
            dtype: self.dtype,
            block_size: self.block_size,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
        }
    }
}

impl PagedKv<'_> {
    /// Bytes of one token slot (`n_kv_heads` head rows).
    pub fn slot_bytes(&self) -> usize {
        self.n_kv_heads * self.dtype.row_bytes(self.head_dim)
    }

    /// The stored K and V row of `kv_head` at `pos`, decoded to f32 by the scalar spec
    /// ([`KvDtype::decode_row`]); `k` and `v` take `head_dim` floats.
    pub fn read_row(
        &self,
        block_table: &[u32],
        pos: usize,
        kv_head: usize,
        k: &mut [f32],
        v: &mut [f32],
    ) {
        let rb = self.dtype.row_bytes(self.head_dim);
        let off = slot_offset(block_table, self.block_size, self.slot_bytes(), pos) + kv_head * rb;
        self.dtype.decode_row(&self.v[off..off + rb], v);
        let tile = self.key_tile();
        let at = tile.offset(
            block_table[pos / self.block_size] as usize,
            kv_head,
            self.n_kv_heads,
        );
        let mut row = vec![0u8; rb];
        tile.gather(
            &self.k[at..at + tile.bytes()],
            pos % self.block_size,
            &mut row,
        );
        self.dtype.decode_row(&row, k);
    }

    /// The stored key rows of `kv_head` at `positions`, decoded to f32 by the scalar spec
    /// into `out` (`head_dim` floats per position, in order). Reads no value array, so it
    /// serves keys-only caches (latent attention) too.
    pub fn read_keys(
        &self,
        block_table: &[u32],
        positions: std::ops::Range<usize>,
        kv_head: usize,
        out: &mut [f32],
    ) {
        let (hd, bs) = (self.head_dim, self.block_size);
        assert_eq!(out.len(), positions.len() * hd, "read_keys: out size");
        let tile = self.key_tile();
        let mut row = vec![0u8; self.dtype.row_bytes(hd)];
        for (pos, dst) in positions.zip(out.chunks_exact_mut(hd)) {
            let at = tile.offset(block_table[pos / bs] as usize, kv_head, self.n_kv_heads);
            tile.gather(&self.k[at..at + tile.bytes()], pos % bs, &mut row);
            self.dtype.decode_row(&row, dst);
        }
    }

    /// The layout of this cache's key tiles.
    fn key_tile(&self) -> KeyTile {
        KeyTile {
            block_size: self.block_size,
            head_dim: self.head_dim,
            dtype: self.dtype,
        }
    }
}

/// Byte offset of the slot (all kv heads) of position `pos`.
#[inline]
fn slot_offset(block_table: &[u32], block_size: usize, slot_bytes: usize, pos: usize) -> usize {
    let block = block_table[pos / block_size] as usize;
    (block * block_size + pos % block_size) * slot_bytes
}

/// One sequence's queries: `n_q` consecutive positions starting at `q_start_pos`.
#[derive(Clone, Copy)]
pub struct AttnSeq<'a> {
    /// `n_q × n_heads × head_dim`.
    pub q: &'a [f32],
    pub n_q: usize,
    pub q_start_pos: usize,
    /// Physical block of each logical block; must cover positions `..q_start_pos + n_q`.
    /// Entries wholly before the window of the first query (`first_key(q_start_pos)`) are
    /// never read and may hold any value (a released block's placeholder).
    pub block_table: &'a [u32],
}

/// Head count, score scale, optional sliding window, optional score soft-capping, optional
/// ALiBi position biases (added after soft-capping) and optional attention sinks.
#[derive(Debug, Clone, Copy)]
pub struct AttnParams<'a> {
    pub n_heads: usize,
    pub scale: f32,
    /// Query at position `p` sees keys `max(0, p − window + 1)..=p`; `None` = all.
    pub window: Option<usize>,
    /// Soft-capping (Gemma 2): every scaled score `s` becomes `cap · tanh(s / cap)` before
    /// masking and softmax; `None` = scores as they are.
    pub softcap: Option<f32>,
    /// Head `h` adds `slope_h · (key_pos − query_pos)` to its scaled scores ([`Alibi`]);
    /// `None` costs nothing.
    pub alibi: Option<Alibi>,
    /// Attention sinks (gpt-oss), one logit per query head: it joins the head's softmax
    /// denominator next to the scaled scores, with no value row, so it only takes weight away
    /// from the keys (`out = Σ e^(s_j) v_j / (Σ e^(s_j) + e^sink)`); `None` costs nothing.
    pub sinks: Option<&'a [f32]>,
}

impl AttnParams<'_> {
    #[inline]
    fn first_key(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }

    /// The ALiBi slope of query head `head` (0 without ALiBi).
    #[inline]
    fn slope(&self, head: usize) -> f32 {
        self.alibi.map_or(0.0, |a| a.slope(head, self.n_heads))
    }

    /// The sink logit of query head `head`, if the heads have sinks.
    #[inline]
    fn sink(&self, head: usize) -> Option<f32> {
        self.sinks.map(|s| s[head])
    }
}

/// Causal attention for every query of every sequence; `out` has the layout of the
/// queries, sequences concatenated. See the module docs.
pub fn attention(
    pool: &ThreadPool,
    kv: &PagedKv<'_>,
    seqs: &[AttnSeq<'_>],
    n_heads: usize,
    scale: f32,
    window: Option<usize>,
    out: &mut [f32],
) {
    let params = AttnParams {
        n_heads,
        scale,
        window,
        alibi: None,
        softcap: None,
        sinks: None,
    };
    attention_with(Isa::detected(), pool, kv, seqs, params, out)
}

type UnitFn = fn(&Ctx<'_>, Unit, &mut Vec<f32>);

/// [`attention`] with every parameter, for this CPU's best variant.
pub fn attention_params(
    pool: &ThreadPool,
    kv: &PagedKv<'_>,
    seqs: &[AttnSeq<'_>],
    params: AttnParams,
    out: &mut [f32],
) {
    attention_with(Isa::detected(), pool, kv, seqs, params, out)
}

/// [`attention`] with the variant for `isa` (capped at what this CPU supports).
pub fn attention_with(
    isa: Isa,
    pool: &ThreadPool,
    kv: &PagedKv<'_>,
    seqs: &[AttnSeq<'_>],
    params: AttnParams,
    out: &mut [f32],
) {
    validate(kv, seqs, &params, out.len());
    let group = params.n_heads / kv.n_kv_heads.max(1);
    let mut ctx = Ctx {
        kv,
        seqs,
        params,
        group,
        split: 1,
        chunks: KeyChunks::new(kv.block_size),
    };
    // Few units (single-sequence decode) on the portable path: one unit per query head so
    // every thread works. The SIMD tiled path would gain nothing: a unit with all the
    // group's rows costs what one with a single row does (they share the registers).
    let portable = isa.min(Isa::supported()) == Isa::Scalar;
    if portable && count_units(&ctx) < 2 * pool.n_threads() {
        ctx.split = group;
    }
    let run = unit_fn(isa, kv.dtype);
    let total = count_units(&ctx);
    let next = AtomicUsize::new(0);
    thread_local! {
        static BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
        static PARTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }
    PARTS.with_borrow_mut(|parts| {
        parts.clear();
        parts.resize(partial_floats(&ctx), 0.0);
        let (shared_out, shared_parts) = (SharedMut::new(&mut *out), SharedMut::new(parts));
        pool.broadcast(&|_, _| {
            BUF.with_borrow_mut(|buf| {
                let claim = || next.fetch_add(1, Ordering::Relaxed);
                let mut ahead = None;
                loop {
                    let idx = ahead.take().unwrap_or_else(claim);
                    if idx >= total {
                        break;
                    }
                    let unit = locate(&ctx, idx);
                    if unit.q1 - unit.q0 == 1 {
                        // A decode unit is short and waits on memory: claim the next unit
                        // now and ask for its first blocks, so they arrive while this one
                        // computes. (Prefill units claim as they finish, which balances
                        // uneven tiles.)
                        let n = claim();
                        if n < total {
                            decode::prefetch_unit(&ctx, locate(&ctx, n));
                        }
                        ahead = Some(n);
                    }
                    run(&ctx, unit, buf);
                    match unit.chunk {
                        Some(_) => write_partial(&ctx, unit, buf, &shared_parts),
                        None => write_unit(&ctx, unit, buf, &shared_out),
                    }
                }
            })
        });
        merge_chunks(&ctx, parts, out);
    });
}

fn unit_fn(isa: Isa, dtype: KvDtype) -> UnitFn {
    match dtype {
        KvDtype::F32 => unit_fn_for::<F32Row>(isa),
        KvDtype::F16 => unit_fn_for::<F16Row>(isa),
        KvDtype::Q8 => unit_fn_for::<Q8Row>(isa),
    }
}

fn unit_fn_for<E: SimdEntries>(isa: Isa) -> UnitFn {
    let best = Isa::supported();
    match isa.min(best) {
        Isa::Scalar => run_unit::<E>,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => E::AVX2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => E::AVX512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => run_unit::<E>,
    }
}

/// A storage format's SIMD entry points ([`tiled::run_tiled`] compiled with each ISA's
/// features).
trait SimdEntries: KvElem {
    #[cfg(target_arch = "x86_64")]
    const AVX2: UnitFn;
    #[cfg(target_arch = "x86_64")]
    const AVX512: UnitFn;
}

/// Implements [`SimdEntries`] for one [`KvElem`] type with two `simd_entry!` functions.
macro_rules! simd_entries {
    ($elem:ty, $avx2:ident, $avx512:ident) => {
        #[cfg(target_arch = "x86_64")]
        simd_entry!(
            $avx2,
            "avx2,fma,f16c",
            fn(c: &Ctx<'_>, u: Unit, b: &mut Vec<f32>),
            // SAFETY: compiled with, and only handed out for CPUs with, Avx2's features.
            unsafe { tiled::run_tiled::<lanes::x86::Avx2, $elem>(c, u, b) }
        );
        #[cfg(target_arch = "x86_64")]
        simd_entry!(
            $avx512,
            "avx512f,avx512bw,avx2,fma,f16c",
            fn(c: &Ctx<'_>, u: Unit, b: &mut Vec<f32>),
            // SAFETY: compiled with, and only handed out for CPUs with, Avx512's features.
            unsafe { tiled::run_tiled::<lanes::x86::Avx512, $elem>(c, u, b) }
        );
        impl SimdEntries for $elem {
            #[cfg(target_arch = "x86_64")]
            const AVX2: UnitFn = $avx2;
            #[cfg(target_arch = "x86_64")]
            const AVX512: UnitFn = $avx512;
        }
    };
}
simd_entries!(F32Row, run_unit_avx2_f32, run_unit_avx512_f32);
simd_entries!(F16Row, run_unit_avx2_f16, run_unit_avx512_f16);
simd_entries!(Q8Row, run_unit_avx2_q8, run_unit_avx512_q8);

fn validate(kv: &PagedKv<'_>, seqs: &[AttnSeq<'_>], p: &AttnParams, out_len: usize) {
    let (bs, hd, n_kv) = (kv.block_size, kv.head_dim, kv.n_kv_heads);
    assert!(
        bs > 0 && hd > 0 && n_kv > 0,
        "attention: zero-sized cache geometry"
    );
    assert!(
        p.n_heads.is_multiple_of(n_kv) && p.n_heads > 0,
        "attention: n_heads % n_kv_heads != 0"
    );
    assert!(p.window != Some(0), "attention: window must be at least 1");
    assert!(
        p.softcap.is_none_or(|c| c.is_finite() && c > 0.0),
        "attention: softcap must be positive and finite"
    );
    assert!(
        p.sinks
            .is_none_or(|s| s.len() == p.n_heads && s.iter().all(|x| x.is_finite())),
        "attention: one finite sink per query head"
    );
    let block_len = bs * kv.slot_bytes();
    assert!(
        kv.k.len() == kv.v.len() && kv.k.len().is_multiple_of(block_len),
        "attention: cache size"
    );
    let num_blocks = (kv.k.len() / block_len) as u32;
    let mut total = 0;
    for s in seqs {
        assert_eq!(
            s.q.len(),
            s.n_q * p.n_heads * hd,
            "attention: q must be n_q × n_heads × hd"
        );
        let needed = (s.q_start_pos + s.n_q).div_ceil(bs);
        assert!(
            s.block_table.len() >= needed,
            "attention: block table too short"
        );
        // Only blocks from the first query's window on are read.
        let first_read = p.first_key(s.q_start_pos) / bs;
        assert!(
            s.block_table[first_read..needed]
                .iter()
                .all(|&b| b < num_blocks),
            "attention: block table entry out of range"
        );
        total += s.q.len();
    }
    assert_eq!(
        out_len, total,
        "attention: out must match the concatenated queries"
    );
}

/// Everything a work unit reads.
struct Ctx<'a> {
    kv: &'a PagedKv<'a>,
    seqs: &'a [AttnSeq<'a>],
    params: AttnParams<'a>,
    /// Query heads per kv head.
    group: usize,
    /// Units per (sequence, kv head, query tile or key chunk): each takes `group / split`
    /// query heads.
    split: usize,
    chunks: KeyChunks,
}

/// (sequence, kv head, queries `q0..q1`, query heads `g0..g1` of the kv head's group);
/// `out_base` is the sequence's offset in `out`. A decode unit of a context that spans
/// several key chunks covers only `chunk`'s keys and leaves its partial at float `part` of
/// the partials buffer (`[chunk][head][head_dim + 2]` per sequence, see [`write_partial`]).
#[derive(Clone, Copy)]
struct Unit {
    seq: usize,
    kv_head: usize,
    q0: usize,
    q1: usize,
    g0: usize,
    g1: usize,
    out_base: usize,
    chunk: Option<usize>,
    part: usize,
}

/// The key chunks `first..=last` that the single query of `s` sees, if it is a decode whose
/// context spans more than one chunk (then each chunk is its own unit).
fn decode_chunks(ctx: &Ctx<'_>, s: &AttnSeq<'_>) -> Option<(usize, usize)> {
    if s.n_q != 1 {
        return None;
    }
    let bs = ctx.kv.block_size;
    let first = ctx
        .chunks
        .of_block(ctx.params.first_key(s.q_start_pos) / bs);
    let last = ctx.chunks.of_block(s.q_start_pos / bs);
    (last > first).then_some((first, last))
}

/// Work units of sequence `s` per (kv head, split part): its query tiles, or its key chunks.
fn seq_units(ctx: &Ctx<'_>, s: &AttnSeq<'_>) -> usize {
    decode_chunks(ctx, s).map_or(s.n_q.div_ceil(Q_TILE), |(first, last)| last - first + 1)
}

fn count_units(ctx: &Ctx<'_>) -> usize {
    let per = ctx.kv.n_kv_heads * ctx.split;
    ctx.seqs.iter().map(|s| seq_units(ctx, s) * per).sum()
}

/// Floats of the partials buffer: `head_dim + 2` per (chunk, query head) of every decode
/// that is split by key chunks.
fn partial_floats(ctx: &Ctx<'_>) -> usize {
    let row = ctx.params.n_heads * (ctx.kv.head_dim + 2);
    ctx.seqs
        .iter()
        .filter_map(|s| decode_chunks(ctx, s))
        .map(|(first, last)| (last - first + 1) * row)
        .sum()
}

/// The `idx`-th unit. Within a sequence, the last query tiles (most keys) come first; a
/// decode split by key chunks lists its chunks in order.
fn locate(ctx: &Ctx<'_>, mut idx: usize) -> Unit {
    let (n_kv, split, hd) = (ctx.kv.n_kv_heads, ctx.split, ctx.kv.head_dim);
    let per_split = ctx.group / split;
    let (mut out_base, mut part_base) = (0, 0);
    for (seq, s) in ctx.seqs.iter().enumerate() {
        let chunks = decode_chunks(ctx, s);
        let n = seq_units(ctx, s);
        if idx < n * n_kv * split {
            let (i, rest) = (idx / (n_kv * split), idx % (n_kv * split));
            let (kv_head, g0) = (rest / split, rest % split * per_split);
            let (q0, q1, chunk) = match chunks {
                Some((first, _)) => (0, 1, Some(first + i)),
                None => {
                    let q0 = (n - 1 - i) * Q_TILE;
                    (q0, (q0 + Q_TILE).min(s.n_q), None)
                }
            };
            let head = kv_head * ctx.group + g0;
            return Unit {
                seq,
                kv_head,
                q0,
                q1,
                g0,
                g1: g0 + per_split,
                out_base,
                chunk,
                part: part_base + (i * ctx.params.n_heads + head) * (hd + 2),
            };
        }
        idx -= n * n_kv * split;
        out_base += s.q.len();
        if chunks.is_some() {
            part_base += n * ctx.params.n_heads * (hd + 2);
        }
    }
    unreachable!("unit index below count_units")
}

/// The portable unit: the decode and tiled paths on [`ScalarVec`] lanes. `buf` starts with
/// `rows = (q1−q0)·(g1−g0)` accumulators of `head_dim`, row `qi·(g1−g0) + gi` being query
/// `q0+qi`, head `kv_head·group + g0 + gi`, normalized on return.
fn run_unit<E: KvElem>(ctx: &Ctx<'_>, u: Unit, buf: &mut Vec<f32>) {
    debug_assert_eq!(
        ctx.kv.dtype,
        E::DTYPE,
        "unit_fn picks the reader of the cache's dtype"
    );
    // SAFETY: the portable lanes need no target features.
    unsafe { tiled::run_tiled::<ScalarVec, E>(ctx, u, buf) }
}

/// Copies a finished unit's outputs from `buf` into `out`.
fn write_unit(ctx: &Ctx<'_>, u: Unit, buf: &[f32], out: &SharedMut<'_, f32>) {
    let (g, hd, n_heads) = (u.g1 - u.g0, ctx.kv.head_dim, ctx.params.n_heads);
    for qi in 0..u.q1 - u.q0 {
        let start = u.out_base + ((u.q0 + qi) * n_heads + u.kv_head * ctx.group + u.g0) * hd;
        // SAFETY: units partition (sequence, query, kv-head group): each (query, head) output
        // row is written by exactly one unit, hence by one thread.
        let dst = unsafe { out.slice_mut(start, g * hd) };
        dst.copy_from_slice(&buf[qi * g * hd..(qi + 1) * g * hd]);
    }
}

/// Copies a key-chunk unit's partial from `buf` (unnormalized accumulators `[rows][hd]`,
/// then `m` and `l` of each row, as [`decode::run_decode`] leaves them) into its rows of
/// the partials buffer, `[acc | m | l]` per row.
fn write_partial(ctx: &Ctx<'_>, u: Unit, buf: &[f32], parts: &SharedMut<'_, f32>) {
    let (rows, hd) = (u.g1 - u.g0, ctx.kv.head_dim);
    // SAFETY: units partition (sequence, kv-head group, key chunk): each partial row is
    // written by exactly one unit, hence by one thread.
    let dst = unsafe { parts.slice_mut(u.part, rows * (hd + 2)) };
    let (acc, rest) = buf.split_at(rows * hd);
    let (m, l) = rest.split_at(rows);
    for (r, row) in dst.chunks_exact_mut(hd + 2).enumerate() {
        row[..hd].copy_from_slice(&acc[r * hd..][..hd]);
        (row[hd], row[hd + 1]) = (m[r], l[r]);
    }
}

/// Folds every chunk-split decode's partials in chunk order ([`key_chunk::merge`]),
/// normalizes and writes the outputs.
fn merge_chunks(ctx: &Ctx<'_>, parts: &[f32], out: &mut [f32]) {
    let (hd, n_heads) = (ctx.kv.head_dim, ctx.params.n_heads);
    let (mut out_base, mut part_base) = (0, 0);
    for s in ctx.seqs {
        if let Some((first, last)) = decode_chunks(ctx, s) {
            let n = last - first + 1;
            let seq_parts = &parts[part_base..][..n * n_heads * (hd + 2)];
            for (head, o) in out[out_base..][..n_heads * hd]
                .chunks_exact_mut(hd)
                .enumerate()
            {
                let row = |c: usize| &seq_parts[(c * n_heads + head) * (hd + 2)..][..hd + 2];
                let (first_row, mut m, mut l) = (row(0), row(0)[hd], row(0)[hd + 1]);
                o.copy_from_slice(&first_row[..hd]);
                for c in 1..n {
                    let r = row(c);
                    let b = Partial {
                        acc: &r[..hd],
                        m: r[hd],
                        l: r[hd + 1],
                    };
                    key_chunk::merge(o, &mut m, &mut l, b);
                }
                if let Some(sink) = ctx.params.sink(head) {
                    block_softmax::add_sinks(std::slice::from_mut(&mut l), &[m], |_| sink);
                }
                block_softmax::normalize(o, &[l], hd);
            }
            part_base += seq_parts.len();
        }
        out_base += s.q.len();
    }
}

/// The spec: decode every stored K/V row that a query can see with [`KvDtype::decode_row`]
/// (rows before the first query's window are left zero: they are masked); then, for every
/// sequence and head, materialize the `n_q × context` score matrix (soft-capped with `tanh` in
/// `f64` when `softcap` is set, then plus the ALiBi bias `slope · (key − query)` when set) with
/// an explicit causal/window mask (−∞), softmax each row in `f64` (the head's sink, when set,
/// joining the denominator), multiply by V.
pub fn reference(kv: &PagedKv<'_>, seqs: &[AttnSeq<'_>], p: AttnParams, out: &mut [f32]) {
    validate(kv, seqs, &p, out.len());
    let (hd, g) = (kv.head_dim, p.n_heads / kv.n_kv_heads);
    let mut out_base = 0;
    for s in seqs {
        let ctx_len = s.q_start_pos + s.n_q;
        let first = p.first_key(s.q_start_pos);
        for kvh in 0..kv.n_kv_heads {
            let (mut k, mut v) = (vec![0.0f32; ctx_len * hd], vec![0.0f32; ctx_len * hd]);
            for (j, (kr, vr)) in k
                .chunks_exact_mut(hd)
                .zip(v.chunks_exact_mut(hd))
                .enumerate()
                .skip(first)
            {
                kv.read_row(s.block_table, j, kvh, kr, vr);
            }
            for head in kvh * g..(kvh + 1) * g {
                for i in 0..s.n_q {
                    let o = &mut out[out_base + (i * p.n_heads + head) * hd..][..hd];
                    let q = &s.q[(i * p.n_heads + head) * hd..][..hd];
                    reference_row(q, &k, &v, (s.q_start_pos + i, head), &p, o);
                }
            }
        }
        out_base += s.q.len();
    }
}

/// One query row of [`reference`] at position `pos`, head `head`, over decoded `k`/`v`
/// (`[context][hd]`).
fn reference_row(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (pos, head): (usize, usize),
    p: &AttnParams,
    o: &mut [f32],
) {
    let hd = q.len();
    let slope = p.slope(head) as f64;
    let scores: Vec<f64> = k
        .chunks_exact(hd)
        .enumerate()
        .map(|(j, kj)| {
            if j > pos || j < p.first_key(pos) {
                return f64::NEG_INFINITY;
            }
            let s = q
                .iter()
                .zip(kj)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>()
                * p.scale as f64;
            let s = match p.softcap {
                Some(cap) => f64::from(cap) * (s / f64::from(cap)).tanh(),
                None => s,
            };
            s + slope * (j as f64 - pos as f64)
        })
        .collect();
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let sink = p.sink(head).map_or(0.0, |s| (f64::from(s) - max).exp());
    let sum: f64 = w.iter().sum::<f64>() + sink;
    for (d, o) in o.iter_mut().enumerate() {
        let acc = (0..w.len())
            .filter(|&j| w[j] != 0.0)
            .map(|j| w[j] * v[j * hd + d] as f64)
            .sum::<f64>();
        *o = (acc / sum) as f32;
    }
}
