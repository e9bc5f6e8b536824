//! The decode path: a unit with one query (its kv head's `g` query heads, `g` rows) scores
//! whole registers of keys at once. Keys are stored dimension-major ([`super::key_tile`]),
//! so one load gives dimension `d` of `W` consecutive keys, and each row adds
//! `q_r[d] · K[d][keys]` with one multiply-add: `g` useful multiply-adds per load, where the
//! rows-in-lanes tiling of [`super::tiled`] would fill `g` of `W` lanes.
//!
//! A unit covers all the keys its query sees, or, for a context that spans several key
//! chunks ([`super::key_chunk`]), one chunk's: it then leaves the chunk's unnormalized
//! partial for the caller to merge.
//!
//! Per block (keys `lo..hi` of it visible to the query):
//!
//! ```text
//!   S[r][slots]  = Σ_d q_r[d] · K[d][slots]    W slots per register (q8 keys scaled first)
//!   S            = cap · tanh(S / cap)          soft-capping only
//!   S[r][j]     += slope_r · (key_j − pos)      ALiBi only
//!   m, l, corr   online softmax of S[r][lo..hi] per row (every row sees the same keys)
//!   acc[r]       = acc[r] · corr[r] + Σ_j P[r][j] · v_j            (tile::pv)
//! ```
//!
//! Each output is bit-identical to the tiled path's for the same query (same operations in
//! the same order per lane), so the path a query takes never changes its result.

use super::elem::{F32Row, KvElem};
use super::lanes::Lanes;
use super::tile::PvArgs;
use super::{Ctx, Unit};
use crate::cpu::ops::vmath;
use crate::cpu::prefetch::to_l2;

/// Computes the single-query unit `u` into `buf`: the accumulators first, as
/// [`super::write_unit`] reads them, normalized; for a key-chunk unit (`u.chunk`), the
/// chunk's partial instead, as [`super::write_partial`] reads it (unnormalized accumulators,
/// then each row's `m`, then its `l`).
///
/// # Safety
/// The CPU has `V`'s target features, and this is compiled with them.
#[inline(always)]
pub(super) unsafe fn run_decode<V: Lanes, E: KvElem>(ctx: &Ctx<'_>, u: Unit, buf: &mut Vec<f32>) {
    debug_assert_eq!(u.q1 - u.q0, 1, "the decode path takes one query");
    let (kv, p, seq) = (ctx.kv, &ctx.params, &ctx.seqs[u.seq]);
    let (hd, bs, rows) = (kv.head_dim, kv.block_size, u.g1 - u.g0);
    let bsp = bs.next_multiple_of(V::W);
    // Only scaled rows (q8) are decoded before the weighted sum.
    let decoded = if E::OFFSET == 0 { 0 } else { bs * hd };
    buf.clear();
    buf.resize(2 * rows * hd + rows * bsp + 3 * rows + decoded, 0.0);
    let (acc, rest) = buf.split_at_mut(rows * hd);
    let (m, rest) = rest.split_at_mut(rows);
    let (l, rest) = rest.split_at_mut(rows);
    let (q, rest) = rest.split_at_mut(rows * hd);
    let (s, rest) = rest.split_at_mut(rows * bsp);
    let (corr, dec) = rest.split_at_mut(rows);
    m.fill(f32::NEG_INFINITY);
    for (r, qr) in q.chunks_exact_mut(hd).enumerate() {
        let head = u.kv_head * ctx.group + u.g0 + r;
        let src = &seq.q[(u.q0 * p.n_heads + head) * hd..][..hd];
        qr.iter_mut().zip(src).for_each(|(d, &x)| *d = x * p.scale);
    }
    let mut st = Decode {
        acc,
        q,
        s,
        bsp,
        m,
        l,
        corr,
        dec,
    };
    let blocks = unit_blocks(ctx, u);
    let last = *blocks.end();
    // The first blocks were asked for when the unit was claimed (`prefetch_unit`), unless
    // this is the thread's first unit.
    prefetch_unit(ctx, u);
    for b in blocks {
        if b + AHEAD <= last {
            prefetch_block(ctx, u, b + AHEAD);
        }
        // SAFETY: the caller's contract.
        unsafe { decode_block::<V, E>(ctx, u, b, &mut st) };
    }
    if u.chunk.is_none() {
        if p.sinks.is_some() {
            let head = |r: usize| u.kv_head * ctx.group + u.g0 + r;
            let sink = |r: usize| p.sink(head(r)).unwrap_or(f32::NEG_INFINITY);
            super::block_softmax::add_sinks(st.l, st.m, sink);
        }
        super::block_softmax::normalize(st.acc, st.l, hd);
    }
}

/// The logical blocks a decode unit reads: those its query sees, within its key chunk if it
/// has one.
fn unit_blocks(ctx: &Ctx<'_>, u: Unit) -> std::ops::RangeInclusive<usize> {
    let (p, seq, bs) = (&ctx.params, &ctx.seqs[u.seq], ctx.kv.block_size);
    let pos = seq.q_start_pos + u.q0;
    let all = p.first_key(pos) / bs..=pos / bs;
    match u.chunk {
        Some(c) => ctx.chunks.blocks_of(c, all),
        None => all,
    }
}

/// A decode unit's state: accumulators, scaled queries (`[rows][hd]` each), one block's
/// scores (`[rows][bsp]`), the online-softmax rows, and room for decoded value rows.
struct Decode<'a> {
    acc: &'a mut [f32],
    q: &'a [f32],
    s: &'a mut [f32],
    bsp: usize,
    m: &'a mut [f32],
    l: &'a mut [f32],
    corr: &'a mut [f32],
    dec: &'a mut [f32],
}

/// How many blocks ahead of the one it computes a decode unit asks for the keys and values it
/// will read, into L2. A decode step reads each layer's cache once, from memory (all layers'
/// caches exceed the last-level cache), in blocks scattered over it, so the hardware's stream
/// prefetchers start cold on every block: only requests issued well ahead keep enough misses
/// in flight. Measured on a Zen 4 core (`decode_attention` example, SmolLM2-135M geometry,
/// 16 sequences): 1-2 blocks ahead into L1, as before, 5.1-5.2 ms a step; 4 ahead into L2 with the
/// next unit's first blocks asked for when it is claimed, 3.7 ms; 8 ahead, 3.9 ms.
const AHEAD: usize = 4;

/// Asks for the first [`AHEAD`] blocks a decode unit reads to be brought into L2 (nothing for
/// a unit of several queries: prefill reuses each block across its queries).
pub(super) fn prefetch_unit(ctx: &Ctx<'_>, u: Unit) {
    if u.q1 - u.q0 != 1 {
        return;
    }
    let blocks = unit_blocks(ctx, u);
    let (first, last) = (*blocks.start(), *blocks.end());
    for b in first..=last.min(first + AHEAD - 1) {
        prefetch_block(ctx, u, b);
    }
}

/// Asks for logical block `b`'s key tile and value rows of the unit's kv head to be brought
/// into L2.
fn prefetch_block(ctx: &Ctx<'_>, u: Unit, b: usize) {
    let (kv, seq) = (ctx.kv, &ctx.seqs[u.seq]);
    let block = seq.block_table[b] as usize;
    let tile = kv.key_tile();
    let at = tile.offset(block, u.kv_head, kv.n_kv_heads);
    to_l2(kv.k[at..at + tile.bytes()].as_ptr(), tile.bytes());
    let (rb, slot) = (kv.dtype.row_bytes(kv.head_dim), kv.slot_bytes());
    let start = block * kv.block_size * slot + u.kv_head * rb;
    for j in 0..kv.block_size {
        to_l2(kv.v[start + j * slot..].as_ptr(), rb);
    }
}

/// Folds the keys of logical block `b` that the unit's query sees into `st`.
///
/// # Safety
/// As [`run_decode`].
#[inline(always)]
unsafe fn decode_block<V: Lanes, E: KvElem>(ctx: &Ctx<'_>, u: Unit, b: usize, st: &mut Decode<'_>) {
    let (kv, p, seq) = (ctx.kv, &ctx.params, &ctx.seqs[u.seq]);
    let (hd, bs, rows, bsp) = (kv.head_dim, kv.block_size, u.g1 - u.g0, st.bsp);
    let pos = seq.q_start_pos + u.q0;
    let bp0 = b * bs;
    let lo = p.first_key(pos).saturating_sub(bp0);
    let hi = (pos + 1 - bp0).min(bs);
    let block = seq.block_table[b] as usize;
    let tile = kv.key_tile();
    let at = tile.offset(block, u.kv_head, kv.n_kv_heads);
    let keys = &kv.k[at..at + tile.bytes()];
    let ks = KeyScores {
        q: st.q,
        rows,
        hd,
        bs,
        tile: keys,
        s: &mut *st.s,
        bsp,
    };
    // SAFETY: features: the caller's contract (bounds are checked inside).
    unsafe { key_scores::<V, E>(ks, lo, hi) };
    for r in 0..rows {
        let row = &mut st.s[r * bsp..(r + 1) * bsp];
        if let Some(cap) = p.softcap {
            vmath::softcap::<false>(&mut row[lo..hi], cap);
        }
        if p.alibi.is_some() {
            let slope = p.slope(u.kv_head * ctx.group + u.g0 + r);
            // SAFETY: features: the caller's contract.
            unsafe { add_alibi::<V>(&mut row[lo..hi], slope, (bp0 + lo) as f32, pos as f32) };
        }
    }
    let mut r = 0;
    while r < rows {
        let fold = Fold {
            s: &mut *st.s,
            bsp,
            keys: lo..hi,
            r0: r,
        };
        let state = (&mut *st.m, &mut *st.l, &mut *st.corr);
        // SAFETY: rows r..r + R ≤ rows of the scores and the state; features: the caller's
        // contract.
        r += unsafe {
            match rows - r {
                1..=2 => fold_rows::<V, 1>(fold, state),
                3 => fold_rows::<V, 3>(fold, state),
                4..=7 => fold_rows::<V, 4>(fold, state),
                _ => fold_rows::<V, 8>(fold, state),
            }
        };
    }
    let (rb, slot) = (kv.dtype.row_bytes(hd), kv.slot_bytes());
    let start = (block * bs + lo) * slot + u.kv_head * rb;
    let n = hi - lo;
    let rows_src = &kv.v[start..start + (n - 1) * slot + rb];
    let (acc, corr, p) = (st.acc.as_mut_ptr(), st.corr.as_ptr(), st.s[lo..].as_ptr());
    let pa = |v: *const u8, v_stride: usize| PvArgs {
        acc,
        rows,
        hd,
        corr,
        p,
        p_key: 1,
        p_row: bsp,
        nk: n,
        v,
        v_stride,
    };
    // SAFETY: acc is rows × hd, corr has rows entries, p[j + r·bsp] with j < n ≤ bsp − lo
    // and r < rows lies in s; v holds n rows of hd values (checked by `rows_src`'s slice
    // and by `f32_rows`). Features: the caller's contract.
    unsafe {
        if E::OFFSET == 0 {
            // Unscaled rows (f32, f16) are widened as they are loaded: no decode pass.
            pv_rows::<V, E>(&pa(rows_src.as_ptr(), slot));
        } else {
            let (v, v_stride) = super::tiled::f32_rows::<V, E>(rows_src, n, slot, hd, st.dec);
            pv_rows::<V, F32Row>(&pa(v, v_stride));
        }
    }
}

/// ALiBi on one row's scores of keys `k0, k0 + 1, ...`: `x += slope · (key − pos)`, rounded
/// once, as [`super::block_softmax::add_alibi`] does.
///
/// # Safety
/// The CPU has `V`'s target features.
#[inline(always)]
unsafe fn add_alibi<V: Lanes>(xs: &mut [f32], slope: f32, k0: f32, pos: f32) {
    for (j, x) in xs.iter_mut().enumerate() {
        // SAFETY: the caller's contract.
        *x = unsafe {
            let d = V::sub(V::splat(k0 + j as f32), V::splat(pos));
            lane0::<V>(V::fma(V::splat(slope), d, V::splat(*x)))
        };
    }
}

/// Rows `r0..r0 + R` of one block's scores and the keys they see.
struct Fold<'a> {
    s: &'a mut [f32],
    bsp: usize,
    keys: std::ops::Range<usize>,
    r0: usize,
}

/// The online-softmax step on rows `r0..r0 + R` of the scores (`[rows][bsp]`), each over
/// its slots `keys`: updates each row's `(m, l, corr)` and leaves `P` in place of the scores;
/// returns `R`. Every value is computed with the same operations, in the same order, as the
/// tiled path's lane of that row (the row's maximum and sum run over the keys in order), so
/// a query gets bit-identical outputs on either path (a speculative verify batch and plain
/// decoding agree). The rows' maxima and sums are serial chains over the keys; running
/// `R` rows side by side keeps `R` chains in flight.
///
/// # Safety
/// The CPU has `V`'s target features.
#[inline(always)]
unsafe fn fold_rows<V: Lanes, const R: usize>(
    f: Fold<'_>,
    (m, l, corr): (&mut [f32], &mut [f32], &mut [f32]),
) -> usize {
    let (bsp, keys, r0) = (f.bsp, f.keys, f.r0);
    assert!(
        bsp.is_multiple_of(V::W)
            && keys.end <= bsp
            && f.s.len() >= (r0 + R) * bsp
            && m.len().min(l.len()).min(corr.len()) >= r0 + R,
        "attention: decode softmax shapes"
    );
    let s = f.s.as_mut_ptr().wrapping_add(r0 * bsp);
    let mut mb = [f32::NEG_INFINITY; R];
    for j in keys.clone() {
        for (i, a) in mb.iter_mut().enumerate() {
            // SAFETY: row r0 + i < the scores' rows, slot j < bsp (asserted above).
            let b = unsafe { *s.add(i * bsp + j) };
            if b > *a {
                *a = b;
            }
        }
    }
    let mut factors = [(0.0, 0.0); R];
    for (i, (mi, ci)) in factors.iter_mut().enumerate() {
        // SAFETY: whole registers c..c + W ≤ bsp of row r0 + i; features: the caller's
        // contract.
        unsafe {
            let mo = V::splat(m[r0 + i]);
            let mv = V::max(mo, V::splat(mb[i]));
            let cv = V::zero_where_neg_inf(mo, V::exp(V::sub(mo, mv)));
            for c in (keys.start / V::W * V::W..keys.end).step_by(V::W) {
                let at = s.add(i * bsp + c);
                let x = V::load(at);
                V::store(at, V::zero_where_neg_inf(x, V::exp(V::sub(x, mv))));
            }
            (*mi, *ci) = (lane0::<V>(mv), lane0::<V>(cv));
        }
    }
    let mut sum = [0.0f32; R];
    for j in keys {
        for (i, a) in sum.iter_mut().enumerate() {
            // SAFETY: as for the maxima.
            *a += unsafe { *s.add(i * bsp + j) };
        }
    }
    for (i, (&(mi, ci), &si)) in factors.iter().zip(&sum).enumerate() {
        // SAFETY: features: the caller's contract.
        let li = unsafe { V::fma(V::splat(l[r0 + i]), V::splat(ci), V::splat(si)) };
        // SAFETY: as above.
        (m[r0 + i], l[r0 + i], corr[r0 + i]) = (mi, unsafe { lane0::<V>(li) }, ci);
    }
    R
}

/// Lane 0 of `v`.
///
/// # Safety
/// The CPU has `V`'s target features.
#[inline(always)]
unsafe fn lane0<V: Lanes>(v: V::R) -> f32 {
    let mut out = [0.0f32; 16];
    assert!(
        V::W <= out.len(),
        "attention: registers of at most 16 lanes"
    );
    // SAFETY: W ≤ 16 floats are written; features: the caller's contract.
    unsafe { V::store(out.as_mut_ptr(), v) };
    out[0]
}

/// `acc = acc · corr + P · V` with a tile as tall as the unit (GQA groups are small), so
/// each value register feeds every row; values read as format `E`.
///
/// # Safety
/// As [`super::tile::pv`].
#[inline(always)]
unsafe fn pv_rows<V: Lanes, E: KvElem>(t: &PvArgs) {
    use super::tile::pv;
    // Accumulators: rows × column registers, within the ISA's register file (16 registers
    // with 8 lanes, 32 with 16).
    // SAFETY: the caller's contract.
    unsafe {
        match (t.rows, V::W >= 16) {
            (1, _) => pv::<V, E, 1, 4>(t),
            (3, false) => pv::<V, E, 3, 2>(t),
            (3, true) => pv::<V, E, 3, 4>(t),
            (4.., true) => pv::<V, E, 4, 4>(t),
            _ => pv::<V, E, 2, 4>(t),
        }
    }
}

/// One block's key scores for a decode unit: `s[r·bsp + j] = Σ_d q[r·hd + d] · k_j[d]`
/// (times key `j`'s q8 scale), for the slots `j` of `lo..hi` (and, in whole registers, some
/// slots around them, which nothing reads). `tile` is the block's key tile.
struct KeyScores<'a> {
    q: &'a [f32],
    rows: usize,
    hd: usize,
    bs: usize,
    tile: &'a [u8],
    s: &'a mut [f32],
    bsp: usize,
}

/// Computes [`KeyScores`] for slots `lo..hi`: whole registers of `W` slots where the tile
/// has them, the ragged end of a block size that is not a multiple of `W` one slot at a
/// time.
///
/// # Safety
/// The CPU has `V`'s target features.
#[inline(always)]
unsafe fn key_scores<V: Lanes, E: KvElem>(mut k: KeyScores<'_>, lo: usize, hi: usize) {
    let (rows, hd, bs) = (k.rows, k.hd, k.bs);
    assert!(
        hi <= bs
            && k.q.len() == rows * hd
            && k.s.len() == rows * k.bsp
            && k.tile.len() == bs * (E::OFFSET + hd * E::SIZE),
        "attention: decode score shapes"
    );
    let whole = bs / V::W * V::W;
    let mut c = lo / V::W * V::W;
    while c < hi.min(whole) {
        let mut r = 0;
        while r < rows {
            // SAFETY: slots c..c + W ≤ whole ≤ bs of every dimension row of the tile; rows
            // r..r + n ≤ rows of q and s; s columns c..c + W ≤ bsp.
            r += unsafe {
                match rows - r {
                    1 => row_scores::<V, E, 1>(&mut k, r, c),
                    2 => row_scores::<V, E, 2>(&mut k, r, c),
                    3 => row_scores::<V, E, 3>(&mut k, r, c),
                    4..=7 => row_scores::<V, E, 4>(&mut k, r, c),
                    _ => row_scores::<V, E, 8>(&mut k, r, c),
                }
            };
        }
        c += V::W;
    }
    for j in whole.max(lo)..hi {
        for r in 0..rows {
            // SAFETY: slot j < bs and d < hd lie in the tile (asserted above).
            k.s[r * k.bsp + j] = unsafe { slot_score::<V, E>(&k, r, j) };
        }
    }
}

/// Rows `r..r + R` × slots `c..c + W`; returns `R`.
///
/// # Safety
/// Those rows and slots are in bounds (see [`key_scores`]); the CPU has `V`'s features.
#[inline(always)]
unsafe fn row_scores<V: Lanes, E: KvElem, const R: usize>(
    k: &mut KeyScores<'_>,
    r: usize,
    c: usize,
) -> usize {
    let (hd, bs) = (k.hd, k.bs);
    // SAFETY: the caller's contract: value (d, c..c + W) at bs·OFFSET + (d·bs + c)·SIZE for
    // d < hd, headers c..c + W, q rows r..r + R, s rows r..r + R at columns c..c + W.
    unsafe {
        let vals = k.tile.as_ptr().add(bs * E::OFFSET + c * E::SIZE);
        let scales = k.tile.as_ptr().add(c * E::OFFSET).cast::<f32>();
        let q = k.q.as_ptr().add(r * hd);
        let mut acc = [V::zero(); R];
        for d in 0..hd {
            let mut kd = V::load_elem::<E>(vals.add(d * bs * E::SIZE));
            if E::OFFSET > 0 {
                kd = V::mul(kd, V::load(scales));
            }
            for (i, a) in acc.iter_mut().enumerate() {
                *a = V::fma(V::splat(*q.add(i * hd + d)), kd, *a);
            }
        }
        for (i, &a) in acc.iter().enumerate() {
            V::store(k.s.as_mut_ptr().add((r + i) * k.bsp + c), a);
        }
    }
    R
}

/// Row `r`'s score for slot `j`, one value at a time (the operations of [`row_scores`]'s lane
/// of that slot).
///
/// # Safety
/// Row `r` and slot `j` are in bounds (see [`key_scores`]); the CPU has `V`'s features.
#[inline(always)]
unsafe fn slot_score<V: Lanes, E: KvElem>(k: &KeyScores<'_>, r: usize, j: usize) -> f32 {
    let (hd, bs) = (k.hd, k.bs);
    // SAFETY: the caller's contract.
    unsafe {
        let vals = k.tile.as_ptr().add(bs * E::OFFSET);
        let scale = V::splat(E::scale(k.tile.as_ptr().add(j * E::OFFSET)));
        let q = &k.q[r * hd..][..hd];
        let mut acc = V::zero();
        for (d, &qd) in q.iter().enumerate() {
            let mut kd = V::splat(E::get(vals, d * bs + j));
            if E::OFFSET > 0 {
                kd = V::mul(kd, scale);
            }
            acc = V::fma(V::splat(qd), kd, acc);
        }
        lane0::<V>(acc)
    }
}
