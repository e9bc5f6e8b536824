//! The online-softmax step of the tiled path ([`super::tiled`]) on one block's scores, laid
//! out `[key][row]` so every step is lane-wise over the rows (no horizontal reductions):
//!
//! ```text
//!   mb[r]   = max_j S[j][r]                      (masked scores are −∞)
//!   m'[r]   = max(m[r], mb[r])
//!   corr[r] = e^(m[r] − m'[r])   (0 while m[r] = −∞: nothing accumulated yet)
//!   P[j][r] = e^(S[j][r] − m'[r])   (0 where masked)
//!   l[r]    = l[r] · corr[r] + Σ_j P[j][r]
//! ```
//!
//! The caller then applies `corr` and adds `P · V` to its accumulators.

use super::lanes::Lanes;

/// Per-row running state, `rp` lanes each.
pub(super) struct RowState<'a> {
    pub m: &'a mut [f32],
    pub l: &'a mut [f32],
    pub corr: &'a mut [f32],
}

/// Turns the scores `s` (`[nk][rp]`) into softmax weights in place and updates `st`, one
/// register of rows at a time, kept in registers across the keys.
///
/// # Safety
/// The CPU has `V`'s target features.
#[inline(always)]
pub(super) unsafe fn fold<V: Lanes>(s: &mut [f32], st: &mut RowState<'_>) {
    let rp = st.m.len();
    assert!(
        rp.is_multiple_of(V::W)
            && s.len().is_multiple_of(rp)
            && st.l.len() == rp
            && st.corr.len() == rp,
        "attention: softmax state shapes"
    );
    for c in (0..rp).step_by(V::W) {
        // SAFETY: lanes c..c + W ≤ rp of every row of s and of the state (asserted above).
        unsafe { fold_lanes::<V>(s, rp, c, st) };
    }
}

/// [`fold`] for rows `c..c + W`.
///
/// # Safety
/// Those lanes are in bounds; the CPU has `V`'s target features.
#[inline(always)]
unsafe fn fold_lanes<V: Lanes>(s: &mut [f32], rp: usize, c: usize, st: &mut RowState<'_>) {
    let nk = s.len() / rp;
    let sp = s.as_mut_ptr().wrapping_add(c);
    // SAFETY: the caller's contract: s[j·rp + c ..][..W] for j < nk and the state's lanes
    // c..c + W are in bounds.
    unsafe {
        let mut mb = V::splat(f32::NEG_INFINITY);
        for j in 0..nk {
            mb = V::max(mb, V::load(sp.add(j * rp)));
        }
        let m_old = V::load(st.m.as_ptr().add(c));
        let m = V::max(m_old, mb);
        // Nothing accumulated yet (m_old = −∞): the factor is 0, never NaN.
        let corr = V::zero_where_neg_inf(m_old, V::exp(V::sub(m_old, m)));
        let mut sum = V::zero();
        for j in 0..nk {
            let x = V::load(sp.add(j * rp));
            let e = V::zero_where_neg_inf(x, V::exp(V::sub(x, m)));
            V::store(sp.add(j * rp), e);
            sum = V::add(sum, e);
        }
        let l = V::load(st.l.as_ptr().add(c));
        V::store(st.l.as_mut_ptr().add(c), V::fma(l, corr, sum));
        V::store(st.m.as_mut_ptr().add(c), m);
        V::store(st.corr.as_mut_ptr().add(c), corr);
    }
}

/// Sets `s[j·rp + r] = −∞` for every key `kp0 + j` outside row `r`'s visible range
/// `visible(r) = first..=last` (rows `0..rows`).
#[inline(always)]
pub(super) fn mask(
    s: &mut [f32],
    rp: usize,
    rows: usize,
    kp0: usize,
    visible: impl Fn(usize) -> (usize, usize),
) {
    let nk = s.len() / rp;
    for r in 0..rows {
        let (first, last) = visible(r);
        let lo = first.saturating_sub(kp0).min(nk);
        let hi = (last + 1).saturating_sub(kp0).clamp(lo, nk);
        for j in (0..lo).chain(hi..nk) {
            s[j * rp + r] = f32::NEG_INFINITY;
        }
    }
}

/// ALiBi: adds `slope[r] · (kp0 + j − pos[r])` to `s[j·rp + r]` (`[nk][rp]`, `rp` =
/// `slope.len()` = `pos.len()`), lane-wise over the rows; padding rows have slope 0. The key
/// and query positions are exact in f32 (below 2^24), so this rounds once, as the spec's
/// `slope · (key − query)`.
///
/// # Safety
/// The CPU has `V`'s target features.
#[inline(always)]
pub(super) unsafe fn add_alibi<V: Lanes>(s: &mut [f32], kp0: usize, slope: &[f32], pos: &[f32]) {
    let rp = slope.len();
    assert!(
        pos.len() == rp && rp.is_multiple_of(V::W) && s.len().is_multiple_of(rp),
        "attention: alibi shapes"
    );
    let nk = s.len() / rp;
    let sp = s.as_mut_ptr();
    for c in (0..rp).step_by(V::W) {
        // SAFETY: lanes c..c + W ≤ rp of `slope`, `pos` and of every row j < nk of `s`
        // (asserted above); features: the caller's contract.
        unsafe {
            let (sl, qp) = (V::load(slope.as_ptr().add(c)), V::load(pos.as_ptr().add(c)));
            for j in 0..nk {
                let x = sp.add(j * rp + c);
                let d = V::sub(V::splat((kp0 + j) as f32), qp);
                V::store(x, V::fma(sl, d, V::load(x)));
            }
        }
    }
}

/// Attention sinks: adds row `r`'s sink term `e^(sink(r) − m[r])` to its softmax denominator
/// `l[r]` (a logit with no value row: it only takes weight away from the keys). `m` is the
/// row's running maximum, the reference point of `l` and of the accumulators.
pub(super) fn add_sinks(l: &mut [f32], m: &[f32], sink: impl Fn(usize) -> f32) {
    for (r, (l_r, &m_r)) in l.iter_mut().zip(m).enumerate() {
        *l_r += (sink(r) - m_r).exp();
    }
}

/// Divides each row of the accumulators (`hd` floats each) by its softmax denominator `l`.
pub(super) fn normalize(acc: &mut [f32], l: &[f32], hd: usize) {
    for (acc_r, &l_r) in acc.chunks_exact_mut(hd).zip(l) {
        let inv = 1.0 / l_r;
        acc_r.iter_mut().for_each(|x| *x *= inv);
    }
}
