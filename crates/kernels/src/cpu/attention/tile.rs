//! Register-tiled micro-kernels of the tiled attention path ([`super::tiled`]): the block's
//! scores `S = K · Qᵀ` on f32 keys and the weighted sum `acc = acc · corr + P · V` on value
//! rows of any unscaled [`KvElem`] format (f32, or f16 widened as it is loaded).
//!
//! Scores keep the query rows in the SIMD lanes, so no horizontal sums are needed. `Qᵀ` is
//! `[head_dim][rp]` (query row `r` in lane `r % W` of register `r / W`; `rp` rows padded to
//! a multiple of `W`), built once per unit, and each key value is broadcast:
//!
//! ```text
//!   for d in 0..head_dim:                       S[j][rows]  += K[j][d] · Qᵀ[d][rows]
//!       q[c]    = Qᵀ[d][c·W ..]          (RC loads)
//!       k       = splat(K[j][d])         (J broadcasts)        RC × J accumulators,
//!       acc[j][c] += k · q[c]            (RC·J FMAs)           one pass over d
//! ```
//!
//! The weighted sum keeps `R` output rows × `CC` column registers in registers while it walks
//! the block's value rows: each value register load feeds `R` FMAs, each broadcast weight
//! `P[j][r]` feeds `CC`.

use super::elem::KvElem;
use super::lanes::Lanes;

/// One block's score problem: `s[j·rp + r] = Σ_d k_j[d] · qt[d·rp + r]` for `j < nk`,
/// `r < rp`. Key `j`'s dimension `d` is an f32 (any alignment) at byte
/// `j · k_key + d · k_dim` of `k` (keys are stored transposed, see [`super::key_tile`]).
pub(super) struct ScoreArgs {
    pub qt: *const f32,
    pub rp: usize,
    pub hd: usize,
    pub k: *const u8,
    pub k_key: usize,
    pub k_dim: usize,
    pub nk: usize,
    pub s: *mut f32,
}

/// One block's weighted sum: for `r < rows`, `acc[r·hd ..][..hd] = acc[r] · corr[r] +
/// Σ_j p[j·p_key + r·p_row] · v_j`, value row `j < nk` being `hd` values of the format the
/// kernel is instantiated with (its header, if any, already skipped and its scale 1) at
/// byte `j · v_stride` of `v`.
pub(super) struct PvArgs {
    pub acc: *mut f32,
    pub rows: usize,
    pub hd: usize,
    pub corr: *const f32,
    pub p: *const f32,
    pub p_key: usize,
    pub p_row: usize,
    pub nk: usize,
    pub v: *const u8,
    pub v_stride: usize,
}

/// Computes [`ScoreArgs`] in tiles of `RC` row registers × `J` keys.
///
/// # Safety
/// Every pointer of `t` is valid for what [`ScoreArgs`] describes, `t.rp` is a multiple of
/// `S::W`, and the CPU has `S`'s target features.
#[inline(always)]
pub(super) unsafe fn scores<S: Lanes, const RC: usize, const J: usize>(t: &ScoreArgs) {
    let mut j = 0;
    // SAFETY: the caller's contract; keys j..j+J ≤ nk.
    unsafe {
        while j + J <= t.nk {
            score_keys::<S, RC, J>(t, j);
            j += J;
        }
        while j < t.nk {
            score_keys::<S, RC, 1>(t, j);
            j += 1;
        }
    }
}

/// Keys `j..j + J`, all row registers.
///
/// # Safety
/// As [`scores`], with keys `j..j + J` in range.
#[inline(always)]
unsafe fn score_keys<S: Lanes, const RC: usize, const J: usize>(t: &ScoreArgs, j: usize) {
    let nc = t.rp / S::W;
    let mut c = 0;
    // SAFETY: the caller's contract; row registers c..c+RC ≤ nc.
    unsafe {
        while c + RC <= nc {
            score_tile::<S, RC, J>(t, j, c);
            c += RC;
        }
        while c < nc {
            score_tile::<S, 1, J>(t, j, c);
            c += 1;
        }
    }
}

/// Keys `j..j + J` × row registers `c..c + RC`, kept in `RC · J` accumulators over all of `d`.
///
/// # Safety
/// As [`scores`], with these keys and row registers in range.
#[inline(always)]
unsafe fn score_tile<S: Lanes, const RC: usize, const J: usize>(t: &ScoreArgs, j: usize, c: usize) {
    // SAFETY: qt[d·rp + (c+i)·W ..][..W] with (c+RC)·W ≤ rp and d < hd; key values at
    // (j+jj)·k_key + d·k_dim with j+jj < nk, d < hd; s rows j+jj < nk, lanes < rp.
    unsafe {
        let mut acc = [[S::zero(); RC]; J];
        let qt = t.qt.add(c * S::W);
        let k = t.k.add(j * t.k_key);
        for d in 0..t.hd {
            let mut q = [S::zero(); RC];
            for (i, qi) in q.iter_mut().enumerate() {
                *qi = S::load(qt.add(d * t.rp + i * S::W));
            }
            let kd = k.add(d * t.k_dim);
            for (jj, a) in acc.iter_mut().enumerate() {
                let kv = kd.add(jj * t.k_key).cast::<f32>().read_unaligned();
                let kv = S::splat(kv);
                for (ai, &qi) in a.iter_mut().zip(&q) {
                    *ai = S::fma(kv, qi, *ai);
                }
            }
        }
        let s = t.s.add(j * t.rp + c * S::W);
        for (jj, a) in acc.iter().enumerate() {
            for (i, &ai) in a.iter().enumerate() {
                S::store(s.add(jj * t.rp + i * S::W), ai);
            }
        }
    }
}

/// Computes [`PvArgs`] in tiles of `R` rows × `CC` column registers; columns past the last
/// whole register are done one at a time. Values are read as format `E`, unscaled: `E` is
/// [`super::elem::F32Row`] for rows decoded beforehand.
///
/// # Safety
/// Every pointer of `t` is valid for what [`PvArgs`] describes (`acc` writable), `E` has no
/// header (`E::OFFSET == 0`), and the CPU has `S`'s target features.
#[inline(always)]
pub(super) unsafe fn pv<S: Lanes, E: KvElem, const R: usize, const CC: usize>(t: &PvArgs) {
    debug_assert_eq!(E::OFFSET, 0, "pv reads unscaled rows");
    let mut r = 0;
    // SAFETY: the caller's contract; rows r..r+R ≤ rows.
    unsafe {
        while r + R <= t.rows {
            pv_rows::<S, E, R, CC>(t, r);
            r += R;
        }
        while r < t.rows {
            pv_rows::<S, E, 1, CC>(t, r);
            r += 1;
        }
    }
}

/// Rows `r..r + R`, all columns.
///
/// # Safety
/// As [`pv`], with rows `r..r + R` in range.
#[inline(always)]
unsafe fn pv_rows<S: Lanes, E: KvElem, const R: usize, const CC: usize>(t: &PvArgs, r: usize) {
    let whole = t.hd / S::W;
    let mut c = 0;
    // SAFETY: the caller's contract; column registers c..c+CC ≤ whole.
    unsafe {
        while c + CC <= whole {
            pv_tile::<S, E, R, CC>(t, r, c * S::W);
            c += CC;
        }
        while c < whole {
            pv_tile::<S, E, R, 1>(t, r, c * S::W);
            c += 1;
        }
        for rr in r..r + R {
            pv_tail::<E>(t, rr, whole * S::W);
        }
    }
}

/// Rows `r..r + R` × columns `col..col + CC·W`, kept in `R · CC` accumulators over the block.
///
/// # Safety
/// As [`pv`], with these rows and columns in range.
#[inline(always)]
unsafe fn pv_tile<S: Lanes, E: KvElem, const R: usize, const CC: usize>(
    t: &PvArgs,
    r: usize,
    col: usize,
) {
    // SAFETY: acc[(r+i)·hd + col + cc·W ..][..W] lies in row r+i < rows (col + CC·W ≤ hd);
    // corr[r+i]; p[j·p_key + (r+i)·p_row] with j < nk, r+i < rows; value row j's floats
    // col..col + CC·W ≤ hd.
    unsafe {
        let acc = t.acc.add(r * t.hd + col);
        let mut a = [[S::zero(); CC]; R];
        for (i, ai) in a.iter_mut().enumerate() {
            let corr = S::splat(*t.corr.add(r + i));
            for (cc, x) in ai.iter_mut().enumerate() {
                *x = S::mul(S::load(acc.add(i * t.hd + cc * S::W)), corr);
            }
        }
        for j in 0..t.nk {
            let row = t.v.add(j * t.v_stride + col * E::SIZE);
            let mut v = [S::zero(); CC];
            for (cc, x) in v.iter_mut().enumerate() {
                *x = S::load_elem::<E>(row.add(cc * S::W * E::SIZE));
            }
            let p = t.p.add(j * t.p_key + r * t.p_row);
            for (i, ai) in a.iter_mut().enumerate() {
                let w = S::splat(*p.add(i * t.p_row));
                for (x, &vc) in ai.iter_mut().zip(&v) {
                    *x = S::fma(w, vc, *x);
                }
            }
        }
        for (i, ai) in a.iter().enumerate() {
            for (cc, &x) in ai.iter().enumerate() {
                S::store(acc.add(i * t.hd + cc * S::W), x);
            }
        }
    }
}

/// Columns `col..hd` of row `r`, one at a time.
///
/// # Safety
/// As [`pv`], with row `r` in range.
#[inline(always)]
unsafe fn pv_tail<E: KvElem>(t: &PvArgs, r: usize, col: usize) {
    // SAFETY: as for `pv_tile`, one float at a time.
    unsafe {
        let corr = *t.corr.add(r);
        for c in col..t.hd {
            let a = t.acc.add(r * t.hd + c);
            let mut x = *a * corr;
            for j in 0..t.nk {
                let v = E::get(t.v.add(j * t.v_stride), c);
                x += *t.p.add(j * t.p_key + r * t.p_row) * v;
            }
            *a = x;
        }
    }
}
