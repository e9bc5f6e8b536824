//! The tiled path of a work unit (every unit on the SIMD paths; on the portable path, units
//! with at least half a register of rows): per cache block, scores for all rows at once as a
//! small matrix product, a lane-wise online softmax, and a register-tiled `P · V`. Decode
//! units (one query, `group` rows) leave lanes idle but still beat per-key dot products,
//! whose horizontal sums dominate.
//!
//! Per unit (rows `r = qi·g + gi` as in [`super::run_unit`], `rp` = rows padded to `W`):
//!
//! ```text
//!   Qᵀ  [head_dim][rp]   queries × score scale, transposed once      (tile::scores)
//!   per block b, keys j0..j1 (those some row can see, all written):
//!     K, V rows          read in place (f32), or decoded once to f32 rows with the q8
//!                        scale folded in (f16, q8)
//!     S   [nk][rp]       = K · Qᵀ                                    (tile::scores)
//!     S   = cap · tanh(S / cap) when soft-capping is on              (vmath::softcap)
//!     S  += slope_r · (key − query_r)   with ALiBi only               (block_softmax)
//!     S  −∞ outside each row's causal/window range (diagonal and window-edge blocks only)
//!     P, corr            online softmax, lane-wise over rows         (block_softmax)
//!     acc [rows][hd]     = acc · corr + P · V                        (tile::pv)
//!   acc /= l
//! ```
//!
//! The blocks are walked one key chunk ([`super::key_chunk`]) at a time: the first chunk
//! into the unit's state, each later one from a fresh state into a second set of
//! accumulators, `m` and `l`, merged into the first in chunk order before `acc /= l`.

use super::block_softmax::{self, RowState};
use super::elem::KvElem;
use super::key_chunk::{self, Partial};
use super::lanes::Lanes;
use super::tile::{PvArgs, ScoreArgs};
use super::{Ctx, KvDtype, Unit};

/// Computes unit `u` into `buf` (accumulators first, as [`super::write_unit`] reads them).
///
/// # Safety
/// The CPU has `V`'s target features, and this is compiled with them.
#[inline(always)]
pub(super) unsafe fn run_tiled<V: Lanes, E: KvElem>(ctx: &Ctx<'_>, u: Unit, buf: &mut Vec<f32>) {
    if u.q1 - u.q0 == 1 {
        // SAFETY: the caller's contract.
        return unsafe { super::decode::run_decode::<V, E>(ctx, u, buf) };
    }
    let (kv, p, seq) = (ctx.kv, &ctx.params, &ctx.seqs[u.seq]);
    let (hd, bs) = (kv.head_dim, kv.block_size);
    let rows = (u.q1 - u.q0) * (u.g1 - u.g0);
    let rp = rows.next_multiple_of(V::W);
    let first_pos = seq.q_start_pos + u.q0;
    let last_pos = seq.q_start_pos + u.q1 - 1;
    let blocks = p.first_key(first_pos) / bs..=last_pos / bs;
    let (c0, c1) = (
        ctx.chunks.of_block(*blocks.start()),
        ctx.chunks.of_block(*blocks.end()),
    );
    let decoded = if E::DTYPE == KvDtype::F32 {
        0
    } else {
        2 * bs * hd
    };
    let alibi_len = if p.alibi.is_some() { 2 * rp } else { 0 };
    // Later key chunks' partials: accumulators, m and l.
    let chunk_len = if c1 > c0 { rows * hd + 2 * rp } else { 0 };
    buf.clear();
    buf.resize(
        rows * hd + 3 * rp + (hd + bs) * rp + alibi_len + decoded + chunk_len,
        0.0,
    );
    let (acc, rest) = buf.split_at_mut(rows * hd);
    let (m, rest) = rest.split_at_mut(rp);
    let (l, rest) = rest.split_at_mut(rp);
    let (corr, rest) = rest.split_at_mut(rp);
    let (qt, rest) = rest.split_at_mut(hd * rp);
    let (s, rest) = rest.split_at_mut(bs * rp);
    let (alibi, rest) = rest.split_at_mut(alibi_len);
    let (dec, next) = rest.split_at_mut(decoded);
    m.fill(f32::NEG_INFINITY);
    load_queries(ctx, u, qt, rp);
    let alibi = (!alibi.is_empty()).then(|| alibi_rows(ctx, u, alibi));
    let mut t = Tile {
        qt,
        s,
        dec,
        alibi,
        rows,
        rp,
    };
    let mut st = RowState { m, l, corr };
    // SAFETY: the caller's contract.
    unsafe {
        walk::<V, E>(
            ctx,
            u,
            ctx.chunks.blocks_of(c0, blocks.clone()),
            &mut t,
            acc,
            &mut st,
        )
    };
    for c in c0 + 1..=c1 {
        let chunk = ctx.chunks.blocks_of(c, blocks.clone());
        // SAFETY: the caller's contract.
        unsafe { merge_chunk::<V, E>(ctx, u, chunk, &mut t, next, acc, &mut st) };
    }
    if p.sinks.is_some() {
        let g = u.g1 - u.g0;
        let head = |r: usize| u.kv_head * ctx.group + u.g0 + r % g;
        let sink = |r: usize| p.sink(head(r)).unwrap_or(f32::NEG_INFINITY);
        block_softmax::add_sinks(&mut st.l[..rows], &st.m[..rows], sink);
    }
    block_softmax::normalize(acc, st.l, hd);
}

/// Walks one later key chunk's `blocks` from a fresh state (accumulators, `m` and `l` in
/// `next`) and folds its partial into the running state `acc`, `st` ([`key_chunk::merge`]).
///
/// # Safety
/// As [`run_tiled`].
#[inline(always)]
unsafe fn merge_chunk<V: Lanes, E: KvElem>(
    ctx: &Ctx<'_>,
    u: Unit,
    blocks: std::ops::RangeInclusive<usize>,
    t: &mut Tile<'_>,
    next: &mut [f32],
    acc: &mut [f32],
    st: &mut RowState<'_>,
) {
    let (hd, rp) = (ctx.kv.head_dim, t.rp);
    let (acc_c, rest) = next.split_at_mut(t.rows * hd);
    let (m_c, l_c) = rest.split_at_mut(rp);
    acc_c.fill(0.0);
    m_c.fill(f32::NEG_INFINITY);
    l_c.fill(0.0);
    let mut st_c = RowState {
        m: m_c,
        l: l_c,
        corr: &mut *st.corr,
    };
    // SAFETY: the caller's contract.
    unsafe { walk::<V, E>(ctx, u, blocks, t, acc_c, &mut st_c) };
    for (r, a) in acc.chunks_exact_mut(hd).enumerate() {
        let b = Partial {
            acc: &acc_c[r * hd..][..hd],
            m: st_c.m[r],
            l: st_c.l[r],
        };
        key_chunk::merge(a, &mut st.m[r], &mut st.l[r], b);
    }
}

/// Folds logical blocks `blocks` into the running state `acc`, `st`.
///
/// # Safety
/// As [`run_tiled`].
#[inline(always)]
unsafe fn walk<V: Lanes, E: KvElem>(
    ctx: &Ctx<'_>,
    u: Unit,
    blocks: std::ops::RangeInclusive<usize>,
    t: &mut Tile<'_>,
    acc: &mut [f32],
    st: &mut RowState<'_>,
) {
    for b in blocks {
        // SAFETY: the caller's contract.
        unsafe { tile_block::<V, E>(ctx, u, b, t, acc, st) };
    }
}

/// A unit's matrices (see the module docs); `dec` holds decoded K and V rows (f16, q8);
/// `alibi` each row's ALiBi slope and query position, when the scores take ALiBi biases.
struct Tile<'a> {
    qt: &'a [f32],
    s: &'a mut [f32],
    dec: &'a mut [f32],
    alibi: Option<(&'a [f32], &'a [f32])>,
    rows: usize,
    rp: usize,
}

/// Fills `buf` (`2·rp` floats, zeroed) with each row's ALiBi slope, then its query position;
/// padding rows keep slope 0. Returns the two halves.
fn alibi_rows<'b>(ctx: &Ctx<'_>, u: Unit, buf: &'b mut [f32]) -> (&'b [f32], &'b [f32]) {
    let (p, g, seq) = (&ctx.params, u.g1 - u.g0, &ctx.seqs[u.seq]);
    let (slope, pos) = buf.split_at_mut(buf.len() / 2);
    for gi in 0..g {
        let s = p.slope(u.kv_head * ctx.group + u.g0 + gi);
        for qi in 0..u.q1 - u.q0 {
            slope[qi * g + gi] = s;
            pos[qi * g + gi] = (seq.q_start_pos + u.q0 + qi) as f32;
        }
    }
    (slope, pos)
}

/// `qt[d·rp + r] = scale · q_r[d]` for the unit's rows `r`; padding lanes stay 0.
fn load_queries(ctx: &Ctx<'_>, u: Unit, qt: &mut [f32], rp: usize) {
    let (hd, p, g) = (ctx.kv.head_dim, &ctx.params, u.g1 - u.g0);
    let seq = &ctx.seqs[u.seq];
    for qi in 0..u.q1 - u.q0 {
        for gi in 0..g {
            let head = u.kv_head * ctx.group + u.g0 + gi;
            let q = &seq.q[((u.q0 + qi) * p.n_heads + head) * hd..][..hd];
            let r = qi * g + gi;
            for (d, &x) in q.iter().enumerate() {
                qt[d * rp + r] = x * p.scale;
            }
        }
    }
}

/// Folds the keys of logical block `b` that some row of `u` sees into the unit's state.
///
/// # Safety
/// As [`run_tiled`].
#[inline(always)]
unsafe fn tile_block<V: Lanes, E: KvElem>(
    ctx: &Ctx<'_>,
    u: Unit,
    b: usize,
    t: &mut Tile<'_>,
    acc: &mut [f32],
    st: &mut RowState<'_>,
) {
    let (kv, p, seq, g) = (ctx.kv, &ctx.params, &ctx.seqs[u.seq], u.g1 - u.g0);
    let (hd, bs, rp) = (kv.head_dim, kv.block_size, t.rp);
    let (first_pos, last_pos) = (seq.q_start_pos + u.q0, seq.q_start_pos + u.q1 - 1);
    let bp0 = b * bs;
    // Keys before the first row's window start are hidden from every row; keys after the
    // last query are not visible (nor necessarily written yet).
    let j0 = p.first_key(first_pos).saturating_sub(bp0);
    let nk = (last_pos + 1 - bp0).min(bs) - j0;
    let (rb, slot) = (kv.dtype.row_bytes(hd), kv.slot_bytes());
    let block = seq.block_table[b] as usize;
    let start = (block * bs + j0) * slot + u.kv_head * rb;
    let (dk, dv) = t.dec.split_at_mut(t.dec.len() / 2);
    let tile = kv.key_tile();
    let at = tile.offset(block, u.kv_head, kv.n_kv_heads);
    // SAFETY: features are the caller's contract (`f32_keys` and `f32_rows` check bounds).
    let ((k, k_dim), (v, v_stride)) = unsafe {
        (
            f32_keys::<V, E>(&kv.k[at..at + tile.bytes()], bs, hd, j0..j0 + nk, dk),
            f32_rows::<V, E>(&kv.v[start..start + (nk - 1) * slot + rb], nk, slot, hd, dv),
        )
    };
    let s = &mut t.s[..nk * rp];
    let sa = ScoreArgs {
        qt: t.qt.as_ptr(),
        rp,
        hd,
        k,
        k_key: 4,
        k_dim,
        nk,
        s: s.as_mut_ptr(),
    };
    // SAFETY: qt is hd × rp, s is nk × rp, k holds nk rows of hd floats; rp is a multiple
    // of W. Features: the caller's contract.
    unsafe { V::scores(&sa) };
    if let Some(cap) = p.softcap {
        // Padding lanes hold 0 and stay 0; masked scores are set after.
        crate::cpu::ops::vmath::softcap::<false>(s, cap);
    }
    let kp0 = bp0 + j0;
    if let Some((slope, pos)) = t.alibi {
        // SAFETY: features: the caller's contract (shapes are checked inside).
        unsafe { block_softmax::add_alibi::<V>(s, kp0, slope, pos) };
    }
    let all_visible = kp0 >= p.first_key(last_pos) && kp0 + nk - 1 <= first_pos;
    if !all_visible {
        let visible = |r: usize| {
            let pos = first_pos + r / g;
            (p.first_key(pos), pos)
        };
        block_softmax::mask(s, rp, t.rows, kp0, visible);
    }
    // SAFETY: rp is a multiple of W; features: the caller's contract.
    unsafe { block_softmax::fold::<V>(s, st) };
    let pa = PvArgs {
        acc: acc.as_mut_ptr(),
        rows: t.rows,
        hd,
        corr: st.corr.as_ptr(),
        p: s.as_ptr(),
        p_key: rp,
        p_row: 1,
        nk,
        v,
        v_stride,
    };
    // SAFETY: acc is rows × hd, corr has rp ≥ rows entries, p is nk × rp, v holds nk rows
    // of hd floats. Features: the caller's contract.
    unsafe { V::pv(&pa) };
}

/// Keys `slots` of the key tile `tile` ([`super::key_tile`], `bs` slots of `hd` values) as
/// f32, dimension-major: a pointer to key `slots.start`'s dimension 0 (the next key is 4
/// bytes on) and the byte stride between dimensions. An f32 tile is used in place; others
/// are decoded into `dec` (`[hd][slots.len()]`), the q8 scales folded in.
///
/// # Safety
/// The CPU has `V`'s target features.
#[inline(always)]
unsafe fn f32_keys<V: Lanes, E: KvElem>(
    tile: &[u8],
    bs: usize,
    hd: usize,
    slots: std::ops::Range<usize>,
    dec: &mut [f32],
) -> (*const u8, usize) {
    assert!(
        slots.end <= bs && tile.len() == bs * (E::OFFSET + hd * E::SIZE),
        "attention: key tile out of bounds"
    );
    let vals = tile[bs * E::OFFSET..].as_ptr();
    if E::DTYPE == KvDtype::F32 {
        return (vals.wrapping_add(4 * slots.start), 4 * bs);
    }
    let n = slots.len();
    let whole = n / V::W * V::W;
    let scale = |j: usize| {
        // SAFETY: slot j < bs: its header lies in the tile (asserted above).
        unsafe { E::scale(tile.as_ptr().add(j * E::OFFSET)) }
    };
    for (d, out) in dec[..hd * n].chunks_exact_mut(n).enumerate() {
        // SAFETY: dimension d < hd of slots.start..slots.end ≤ bs lies in the tile; stores go
        // to out[i..i + W] with i + W ≤ whole ≤ n.
        unsafe {
            let row = vals.add((d * bs + slots.start) * E::SIZE);
            for i in (0..whole).step_by(V::W) {
                let mut x = V::load_elem::<E>(row.add(i * E::SIZE));
                if E::OFFSET > 0 {
                    let scales = tile.as_ptr().add((slots.start + i) * E::OFFSET);
                    x = V::mul(x, V::load(scales.cast()));
                }
                V::store(out.as_mut_ptr().add(i), x);
            }
            for (i, o) in out.iter_mut().enumerate().skip(whole) {
                *o = E::get(row, i) * scale(slots.start + i);
            }
        }
    }
    (dec.as_ptr().cast(), 4 * n)
}

/// The `n` stored rows in `src` (`stride` bytes apart) as f32 rows: a pointer to row 0 and
/// the row stride in bytes. f32 rows are used in place; others are decoded into `dec`, the
/// q8 scale folded in.
///
/// # Safety
/// The CPU has `V`'s target features.
#[inline(always)]
pub(super) unsafe fn f32_rows<V: Lanes, E: KvElem>(
    src: &[u8],
    n: usize,
    stride: usize,
    hd: usize,
    dec: &mut [f32],
) -> (*const u8, usize) {
    assert!(
        (n - 1) * stride + E::OFFSET + hd * E::SIZE <= src.len(),
        "attention: head rows out of bounds"
    );
    if E::DTYPE == KvDtype::F32 {
        return (src.as_ptr(), stride);
    }
    let whole = hd / V::W * V::W;
    for (j, out) in dec[..n * hd].chunks_exact_mut(hd).enumerate() {
        let row = src[j * stride..].as_ptr();
        // SAFETY: row j's header and hd values are in bounds (asserted above); stores go
        // to out[i..i + W] with i + W ≤ whole ≤ hd.
        unsafe {
            let (scale, vals) = (E::scale(row), row.add(E::OFFSET));
            let sv = V::splat(scale);
            for i in (0..whole).step_by(V::W) {
                let x = V::load_elem::<E>(vals.add(i * E::SIZE));
                V::store(out.as_mut_ptr().add(i), V::mul(x, sv));
            }
            for (i, o) in out.iter_mut().enumerate().skip(whole) {
                *o = E::get(vals, i) * scale;
            }
        }
    }
    (dec.as_ptr().cast(), 4 * hd)
}
