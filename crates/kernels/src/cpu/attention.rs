//! Causal attention over a paged KV cache, for a batch of sequences in one call.
//!
//! Cache layout per layer: `k` and `v` are each `[num_blocks][block_size][n_kv_heads][head_dim]`
//! `f32`. A sequence's token at position `p` lives in physical block `block_table[p / bs]`,
//! slot `p % bs`:
//!
//! ```text
//!   block_table = [7, 2, 9]   (bs = 4)          offset of (p, kv head h):
//!   pos:  0 1 2 3 | 4 5 6 7 | 8 9              ((block_table[p/bs]·bs + p%bs)·n_kv + h)·head_dim
//!   blk:  7 7 7 7 | 2 2 2 2 | 9 9
//! ```
//!
//! The kernel is tiled online softmax ("flash" attention): work units are
//! (sequence, kv head, tile of up to [`Q_TILE`] queries); a unit walks the cache one block at
//! a time, and all the query heads of its tile that share the kv head (GQA) score against
//! the block while it is in L1. Running max `m`, denominator `l` and the unnormalized output
//! are rescaled per block, so memory is O(tile) per thread, never O(context). Units are
//! handed out dynamically (an atomic counter) to balance causal prefill tiles.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cpu::ops::{simd_entry, vmath};
use crate::cpu::threadpool::SharedMut;
use crate::cpu::{Isa, ThreadPool};

/// Queries per work unit in prefill.
pub const Q_TILE: usize = 16;

/// One layer's KV cache, read-only.
#[derive(Clone, Copy)]
pub struct PagedKv<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// One layer's KV cache, writable (see [`store_kv`]).
pub struct PagedKvMut<'a> {
    pub k: &'a mut [f32],
    pub v: &'a mut [f32],
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
            block_size: self.block_size,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
        }
    }
}

/// Offset of the `[n_kv_heads][head_dim]` row of position `pos`.
#[inline]
fn slot_offset(block_table: &[u32], block_size: usize, row_len: usize, pos: usize) -> usize {
    let block = block_table[pos / block_size] as usize;
    (block * block_size + pos % block_size) * row_len
}

/// Write one token's `k_row` and `v_row` (`n_kv_heads · head_dim` each) at position `pos`.
pub fn store_kv(
    kv: &mut PagedKvMut<'_>,
    block_table: &[u32],
    pos: usize,
    k_row: &[f32],
    v_row: &[f32],
) {
    let row = kv.n_kv_heads * kv.head_dim;
    assert!(
        k_row.len() == row && v_row.len() == row,
        "store_kv: rows must be n_kv·head_dim"
    );
    let off = slot_offset(block_table, kv.block_size, row, pos);
    kv.k[off..off + row].copy_from_slice(k_row);
    kv.v[off..off + row].copy_from_slice(v_row);
}

/// One sequence's queries: `n_q` consecutive positions starting at `q_start_pos`.
#[derive(Clone, Copy)]
pub struct AttnSeq<'a> {
    /// `n_q × n_heads × head_dim`.
    pub q: &'a [f32],
    pub n_q: usize,
    pub q_start_pos: usize,
    /// Physical block of each logical block; must cover positions `..q_start_pos + n_q`.
    pub block_table: &'a [u32],
}

/// Head count, score scale and optional sliding window.
#[derive(Debug, Clone, Copy)]
pub struct AttnParams {
    pub n_heads: usize,
    pub scale: f32,
    /// Query at position `p` sees keys `max(0, p − window + 1)..=p`; `None` = all.
    pub window: Option<usize>,
}

impl AttnParams {
    #[inline]
    fn first_key(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
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
    };
    attention_with(Isa::detected(), pool, kv, seqs, params, out)
}

type UnitFn = fn(&Ctx<'_>, Unit, &mut Vec<f32>);

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
    // Few units (single-sequence decode): one unit per query head so every thread works.
    let split = if count_units(seqs, kv.n_kv_heads, 1) < 2 * pool.n_threads() {
        group
    } else {
        1
    };
    let ctx = Ctx {
        kv,
        seqs,
        params,
        group,
        split,
    };
    let run = unit_fn(isa);
    let total = count_units(seqs, kv.n_kv_heads, split);
    let next = AtomicUsize::new(0);
    let out = SharedMut::new(out);
    thread_local! {
        static BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }
    pool.broadcast(&|_, _| {
        BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            loop {
                let idx = next.fetch_add(1, Ordering::Relaxed);
                if idx >= total {
                    break;
                }
                let unit = locate(&ctx, idx);
                run(&ctx, unit, &mut buf);
                write_unit(&ctx, unit, &buf, &out);
            }
        })
    });
}

fn unit_fn(isa: Isa) -> UnitFn {
    let best = Isa::available().last().copied().unwrap_or(Isa::Scalar);
    match isa.min(best) {
        Isa::Scalar => run_unit::<false, 4, ScalarVec>,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => run_unit_avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => run_unit_avx512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => run_unit::<false, 4, ScalarVec>,
    }
}

#[cfg(target_arch = "x86_64")]
simd_entry!(
    run_unit_avx2,
    "avx2,fma",
    fn(c: &Ctx<'_>, u: Unit, b: &mut Vec<f32>),
    run_unit::<true, 16, x86vec::Avx2>(c, u, b)
);
#[cfg(target_arch = "x86_64")]
simd_entry!(
    run_unit_avx512,
    "avx512f,avx2,fma",
    fn(c: &Ctx<'_>, u: Unit, b: &mut Vec<f32>),
    run_unit::<true, 16, x86vec::Avx512>(c, u, b)
);

fn validate(kv: &PagedKv<'_>, seqs: &[AttnSeq<'_>], p: &AttnParams, out_len: usize) {
    let (bs, hd, n_kv) = (kv.block_size, kv.head_dim, kv.n_kv_heads);
    assert!(
        bs > 0 && hd > 0 && n_kv > 0,
        "attention: zero-sized cache geometry"
    );
    assert!(
        p.n_heads % n_kv == 0 && p.n_heads > 0,
        "attention: n_heads % n_kv_heads != 0"
    );
    assert!(p.window != Some(0), "attention: window must be at least 1");
    let block_len = bs * n_kv * hd;
    assert!(
        kv.k.len() == kv.v.len() && kv.k.len() % block_len == 0,
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
        assert!(
            s.block_table[..needed].iter().all(|&b| b < num_blocks),
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
    params: AttnParams,
    /// Query heads per kv head.
    group: usize,
    /// Units per (sequence, kv head, query tile): each takes `group / split` query heads.
    split: usize,
}

/// (sequence, kv head, queries `q0..q1`, query heads `g0..g1` of the kv head's group);
/// `out_base` is the sequence's offset in `out`.
#[derive(Clone, Copy)]
struct Unit {
    seq: usize,
    kv_head: usize,
    q0: usize,
    q1: usize,
    g0: usize,
    g1: usize,
    out_base: usize,
}

fn count_units(seqs: &[AttnSeq<'_>], n_kv: usize, split: usize) -> usize {
    seqs.iter()
        .map(|s| s.n_q.div_ceil(Q_TILE) * n_kv * split)
        .sum()
}

/// The `idx`-th unit. Within a sequence, the last query tiles (most keys) come first.
fn locate(ctx: &Ctx<'_>, mut idx: usize) -> Unit {
    let (n_kv, split) = (ctx.kv.n_kv_heads, ctx.split);
    let per_split = ctx.group / split;
    let mut out_base = 0;
    for (seq, s) in ctx.seqs.iter().enumerate() {
        let tiles = s.n_q.div_ceil(Q_TILE);
        if idx < tiles * n_kv * split {
            let (tile_idx, rest) = (idx / (n_kv * split), idx % (n_kv * split));
            let q0 = (tiles - 1 - tile_idx) * Q_TILE;
            let part = rest % split;
            return Unit {
                seq,
                kv_head: rest / split,
                q0,
                q1: (q0 + Q_TILE).min(s.n_q),
                g0: part * per_split,
                g1: (part + 1) * per_split,
                out_base,
            };
        }
        idx -= tiles * n_kv * split;
        out_base += s.q.len();
    }
    unreachable!("unit index below count_units")
}

/// Computes one unit into `buf`: `rows = (q1−q0)·(g1−g0)` accumulators of `head_dim`, then
/// `l[rows]`, `m[rows]` and a block of scores. Row `qi·(g1−g0) + gi` is query `q0+qi`, head
/// `kv_head·group + g0 + gi`. On return the accumulators hold the normalized outputs.
#[inline(always)]
fn run_unit<const F: bool, const L: usize, V: VecOps>(ctx: &Ctx<'_>, u: Unit, buf: &mut Vec<f32>) {
    let (kv, p, g) = (ctx.kv, &ctx.params, u.g1 - u.g0);
    let (hd, bs, row_len) = (kv.head_dim, kv.block_size, kv.n_kv_heads * kv.head_dim);
    let seq = &ctx.seqs[u.seq];
    let rows = (u.q1 - u.q0) * g;
    buf.clear();
    buf.resize(rows * (hd + 2) + bs, 0.0);
    let (acc, rest) = buf.split_at_mut(rows * hd);
    let (l, rest) = rest.split_at_mut(rows);
    let (m, scores) = rest.split_at_mut(rows);
    m.fill(f32::NEG_INFINITY);
    let first_pos = seq.q_start_pos + u.q0;
    let last_pos = seq.q_start_pos + u.q1 - 1;
    for b in p.first_key(first_pos) / bs..=last_pos / bs {
        let base = seq.block_table[b] as usize * bs * row_len + u.kv_head * hd;
        let bp0 = b * bs;
        for qi in 0..u.q1 - u.q0 {
            let pos = first_pos + qi;
            let (lo, hi) = (p.first_key(pos).max(bp0), (pos + 1).min(bp0 + bs));
            if lo >= hi {
                continue;
            }
            let key = |j: usize| base + (lo - bp0 + j) * row_len;
            for gi in 0..g {
                let head = u.kv_head * ctx.group + u.g0 + gi;
                let q_off = ((u.q0 + qi) * p.n_heads + head) * hd;
                let q = &seq.q[q_off..q_off + hd];
                let r = qi * g + gi;
                let sc = &mut scores[..hi - lo];
                for (j, s) in sc.iter_mut().enumerate() {
                    let k = &kv.k[key(j)..key(j) + hd];
                    // SAFETY: `run_unit::<_, _, V>` is only called from an entry point
                    // compiled with V's target features (see `unit_fn`).
                    *s = unsafe { V::dot(q, k) } * p.scale;
                }
                let m_new = m[r].max(vmath::max::<L>(sc));
                let corr = if m[r] == f32::NEG_INFINITY {
                    0.0
                } else {
                    vmath::exp::<F>(m[r] - m_new)
                };
                let acc_r = &mut acc[r * hd..(r + 1) * hd];
                if corr != 1.0 {
                    vmath::scale(acc_r, corr);
                }
                l[r] = l[r] * corr + vmath::exp_sub_sum::<F, L>(sc, m_new);
                m[r] = m_new;
                let v = &kv.v[key(0)..key(sc.len() - 1) + hd];
                // SAFETY: as for `V::dot` above.
                unsafe { V::weighted_sum(acc_r, sc, v, row_len) };
            }
        }
    }
    for (acc_r, &l_r) in acc.chunks_exact_mut(hd).zip(l.iter()) {
        vmath::scale(acc_r, 1.0 / l_r);
    }
}

/// Dot product and `y += a·x` over one head (`head_dim` floats).
///
/// # Safety
/// Implementations may use SIMD instructions: callers must run on a CPU with the
/// implementation's target features, from code compiled with them (so they inline).
trait VecOps {
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32;
    unsafe fn axpy(y: &mut [f32], a: f32, x: &[f32]);

    /// `acc += Σ_j p[j] · v[j·stride .. j·stride + acc.len()]`.
    #[inline(always)]
    unsafe fn weighted_sum(acc: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
        for (j, &pj) in p.iter().enumerate() {
            // SAFETY: forwarded contract.
            unsafe { Self::axpy(acc, pj, &v[j * stride..j * stride + acc.len()]) };
        }
    }
}

/// Portable lanes, no FMA.
struct ScalarVec;

impl VecOps for ScalarVec {
    #[inline(always)]
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        vmath::dot::<false, 4>(a, b)
    }
    #[inline(always)]
    unsafe fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
        vmath::axpy::<false>(y, a, x)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86vec {
    use std::arch::x86_64::*;

    use super::VecOps;

    /// AVX2 + FMA, 8 lanes, two accumulators.
    pub(super) struct Avx2;

    impl VecOps for Avx2 {
        #[inline(always)]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let (pa, pb) = (a.as_ptr(), b.as_ptr());
            // SAFETY: every load reads 8 floats at i < n − 7 (i + 8 ≤ n) of both slices;
            // AVX2/FMA availability is the caller's contract.
            unsafe {
                let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let mut i = 0;
                while i + 16 <= n {
                    s0 =
                        _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                    s1 = _mm256_fmadd_ps(
                        _mm256_loadu_ps(pa.add(i + 8)),
                        _mm256_loadu_ps(pb.add(i + 8)),
                        s1,
                    );
                    i += 16;
                }
                if i + 8 <= n {
                    s0 =
                        _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                    i += 8;
                }
                let s = _mm256_add_ps(s0, s1);
                let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_movehdup_ps(h));
                let mut total = _mm_cvtss_f32(h);
                for j in i..n {
                    total = a[j].mul_add(b[j], total);
                }
                total
            }
        }

        #[inline(always)]
        unsafe fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
            let n = y.len().min(x.len());
            let (py, px) = (y.as_mut_ptr(), x.as_ptr());
            // SAFETY: loads and stores touch 8 floats at i with i + 8 ≤ n in both slices;
            // AVX2/FMA availability is the caller's contract.
            unsafe {
                let va = _mm256_set1_ps(a);
                let mut i = 0;
                while i + 8 <= n {
                    let v =
                        _mm256_fmadd_ps(va, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
                    _mm256_storeu_ps(py.add(i), v);
                    i += 8;
                }
                for j in i..n {
                    y[j] = a.mul_add(x[j], y[j]);
                }
            }
        }

        #[inline(always)]
        unsafe fn weighted_sum(acc: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
            // SAFETY: forwarded contract.
            unsafe { weighted_sum_avx2(acc, p, v, stride) }
        }
    }

    /// `acc += Σ_j p[j]·v_j` keeping 32 columns of `acc` in registers across all `j`.
    #[inline(always)]
    unsafe fn weighted_sum_avx2(acc: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
        let hd = acc.len();
        assert!(
            p.is_empty() || (p.len() - 1) * stride + hd <= v.len(),
            "weighted_sum bounds"
        );
        let (pacc, pv) = (acc.as_mut_ptr(), v.as_ptr());
        let mut c = 0;
        // SAFETY: row j reads v[j·stride + c .. j·stride + c + 32] with c + 32 ≤ hd, in bounds
        // by the assert; acc accesses are c..c+32 ≤ hd. AVX2/FMA: the caller's contract.
        unsafe {
            while c + 32 <= hd {
                let mut r = [0; 4].map(|_| _mm256_setzero_ps());
                for (k, reg) in r.iter_mut().enumerate() {
                    *reg = _mm256_loadu_ps(pacc.add(c + 8 * k));
                }
                for (j, &pj) in p.iter().enumerate() {
                    let w = _mm256_set1_ps(pj);
                    let row = pv.add(j * stride + c);
                    for (k, reg) in r.iter_mut().enumerate() {
                        *reg = _mm256_fmadd_ps(w, _mm256_loadu_ps(row.add(8 * k)), *reg);
                    }
                }
                for (k, reg) in r.iter().enumerate() {
                    _mm256_storeu_ps(pacc.add(c + 8 * k), *reg);
                }
                c += 32;
            }
        }
        if c < hd {
            for (j, &pj) in p.iter().enumerate() {
                // SAFETY: as above.
                unsafe { Avx2::axpy(&mut acc[c..], pj, &v[j * stride + c..j * stride + hd]) };
            }
        }
    }

    /// AVX-512F, 16 lanes.
    pub(super) struct Avx512;

    impl VecOps for Avx512 {
        #[inline(always)]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let (pa, pb) = (a.as_ptr(), b.as_ptr());
            // SAFETY: every load reads 16 floats at i with i + 16 ≤ n; the tail goes to the
            // AVX2 version. AVX-512F availability is the caller's contract.
            unsafe {
                let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
                let mut i = 0;
                while i + 32 <= n {
                    s0 =
                        _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                    s1 = _mm512_fmadd_ps(
                        _mm512_loadu_ps(pa.add(i + 16)),
                        _mm512_loadu_ps(pb.add(i + 16)),
                        s1,
                    );
                    i += 32;
                }
                if i + 16 <= n {
                    s0 =
                        _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                    i += 16;
                }
                _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) + Avx2::dot(&a[i..n], &b[i..n])
            }
        }

        #[inline(always)]
        unsafe fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
            let n = y.len().min(x.len());
            let (py, px) = (y.as_mut_ptr(), x.as_ptr());
            // SAFETY: loads and stores touch 16 floats at i with i + 16 ≤ n; the tail goes
            // to the AVX2 version. AVX-512F availability is the caller's contract.
            unsafe {
                let va = _mm512_set1_ps(a);
                let mut i = 0;
                while i + 16 <= n {
                    let v =
                        _mm512_fmadd_ps(va, _mm512_loadu_ps(px.add(i)), _mm512_loadu_ps(py.add(i)));
                    _mm512_storeu_ps(py.add(i), v);
                    i += 16;
                }
                Avx2::axpy(&mut y[i..n], a, &x[i..n]);
            }
        }

        #[inline(always)]
        unsafe fn weighted_sum(acc: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
            // SAFETY: forwarded contract (AVX-512F implies the AVX2/FMA this needs, which
            // the avx512 entry point enables too).
            unsafe { weighted_sum_avx2(acc, p, v, stride) }
        }
    }
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

/// The spec: for every sequence and head, materialize the `n_q × context` score matrix with
/// an explicit causal/window mask (−∞), softmax each row in `f64`, multiply by V.
pub fn reference(kv: &PagedKv<'_>, seqs: &[AttnSeq<'_>], p: AttnParams, out: &mut [f32]) {
    validate(kv, seqs, &p, out.len());
    let (hd, row_len, g) = (
        kv.head_dim,
        kv.n_kv_heads * kv.head_dim,
        p.n_heads / kv.n_kv_heads,
    );
    let mut out_base = 0;
    for s in seqs {
        let ctx_len = s.q_start_pos + s.n_q;
        let key_off = |j: usize| slot_offset(s.block_table, kv.block_size, row_len, j);
        for head in 0..p.n_heads {
            let kvh = head / g;
            for i in 0..s.n_q {
                let pos = s.q_start_pos + i;
                let q = &s.q[(i * p.n_heads + head) * hd..][..hd];
                let scores: Vec<f64> = (0..ctx_len)
                    .map(|j| {
                        if j > pos || j < p.first_key(pos) {
                            return f64::NEG_INFINITY;
                        }
                        let k = &kv.k[key_off(j) + kvh * hd..][..hd];
                        q.iter()
                            .zip(k)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            * p.scale as f64
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = w.iter().sum();
                let o = &mut out[out_base + (i * p.n_heads + head) * hd..][..hd];
                for (d, o) in o.iter_mut().enumerate() {
                    let v = (0..ctx_len)
                        .filter(|&j| w[j] != 0.0)
                        .map(|j| w[j] * kv.v[key_off(j) + kvh * hd + d] as f64)
                        .sum::<f64>();
                    *o = (v / sum) as f32;
                }
            }
        }
        out_base += s.q.len();
    }
}
