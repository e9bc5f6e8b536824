//! The scalar panel kernel: the spec of the packed product. It performs the `f32` operations
//! of the SIMD kernels in the same order (one fused multiply-add per block, and one more for
//! Q4_1's minimum; for the K-quants one per sub-block, one for Q4_K's minimums and one per
//! super-block), so their results are bit-identical to it.

use std::ops::Range;

use super::layout::packed_quant;
use super::{PackedKind, PanelJob, PanelOut, PANEL};

/// The integer dot product of panel row `r`'s elements `range` of one block (`quants`) with
/// that block's activation quants `aq`.
fn dot(kind: PackedKind, quants: &[u8], r: usize, aq: &[i8], range: Range<usize>) -> i32 {
    range
        .map(|e| packed_quant(kind, quants, r, e) as i32 * aq[e] as i32)
        .sum()
}

/// The K-quant products' common loop: `out[j][r] = Σ_i t · d_a` (fused, in block order), with
/// `t = super_block(quants, activation quants, k, r, i)` for super-block `i` of panel row `r`
/// and activation block `k`.
fn k_quant_ref(
    job: &PanelJob<'_>,
    out: &mut PanelOut,
    super_block: impl Fn(&[u8], &[i8], usize, usize, usize) -> f32,
) {
    let (nb, acts) = (job.nb, job.acts);
    for (j, out_j) in out.iter_mut().enumerate().take(job.na) {
        let a = job.j0 + j;
        for (r, o) in out_j.iter_mut().enumerate().take(PANEL) {
            let mut acc = 0.0f32;
            for i in 0..nb {
                let k = a * nb + i;
                let aq = &acts.q[k * 256..][..256];
                let t = super_block(job.quants(i), aq, k, r, i);
                acc = t.mul_add(acts.d[k], acc);
            }
            *o = acc;
        }
    }
}

/// The product of a Q4_K panel: per super-block `i`, with `isum_s` the integer dot product of
/// sub-block `s`, and `msum = Σ_s mn[s] · (activation quant sum of sub-block s)`:
///
/// ```text
///   t = 0;  for s in 0..8:  t = fma(f32(isum_s), d · f32(sc[s]), t)   (d · sc exact in f32)
///   t = fma(f32(msum), −dmin, t)
///   acc = fma(t, d_a, acc)
/// ```
///
/// The GGUF Q4_K kernel sums `sc[s] · isum_s` in integers instead; the two agree up to `f32`
/// rounding.
fn panel_q4_k_ref(job: &PanelJob<'_>, out: &mut PanelOut) {
    k_quant_ref(job, out, |quants, aq, k, r, i| {
        let (d, dmin, sc, mn) = job.q4_k_scales(i, r);
        let (mut t, mut msum) = (0.0f32, 0i32);
        for s in 0..8 {
            let isum = dot(PackedKind::Q4_K, quants, r, aq, 32 * s..32 * s + 32);
            t = (isum as f32).mul_add(d * sc[s] as f32, t);
            msum += mn[s] as i32 * job.acts.sub_sums[k * 8 + s] as i32;
        }
        (msum as f32).mul_add(-dmin, t)
    })
}

/// The product of a Q6_K panel: per super-block `i`, with `isum_s` the integer dot product of
/// sub-block `s` (16 values) with the signed quants (the stored ones, 0..=63, less 32; summed
/// exactly as `Σ q · a − 32 · Σ a`):
///
/// ```text
///   t = 0;  for s in 0..16:  t = fma(f32(isum_s), d · f32(sc[s]), t)   (d · sc exact in f32)
///   acc = fma(t, d_a, acc)
/// ```
///
/// The GGUF Q6_K kernel sums `sc[s] · isum_s` in integers instead; the two agree up to `f32`
/// rounding.
fn panel_q6_k_ref(job: &PanelJob<'_>, out: &mut PanelOut) {
    k_quant_ref(job, out, |quants, aq, k, r, i| {
        let (d, sc) = job.q6_k_scales(i, r);
        let mut t = 0.0f32;
        for (s, &scale) in sc.iter().enumerate() {
            let stored = dot(PackedKind::Q6_K, quants, r, aq, 16 * s..16 * s + 16);
            let isum = stored - 32 * job.acts.bsums[k * 16 + s] as i32;
            t = (isum as f32).mul_add(d * scale as f32, t);
        }
        t
    })
}

/// The spec of the AMX kernel (`x86/amx`) and of the AVX2 one (`x86/avx2.rs`): for Q4_0, Q4_1
/// and Q8_0 [`panel_ref`]; for the K-quants each super-block's sum is taken exactly in `i32`
/// with the sub-block scales inside it, then rounded once (the tile products sum whole
/// super-blocks; the AVX2 `madd` widens the sums by the scales):
///
/// ```text
///   Q4_K:  t = f32(Σ_e sc[e/32] · q_e · a_e) · d;   t = fma(f32(Σ_s mn[s] · sub_sum_s), −dmin, t)
///   Q6_K:  t = f32(Σ_e sc[e/16] · q_e · a_e − 32 · Σ_s sc[s] · bsum_s) · d
///   acc = fma(t, d_a, acc)
/// ```
///
/// It is at least as exact as [`panel_ref`]'s per-sub-block `f32` sums, and agrees with it to
/// `f32` rounding.
pub(super) fn panel_tiles_ref(job: &PanelJob<'_>, out: &mut PanelOut) {
    match job.kind {
        PackedKind::Q4_K => k_quant_ref(job, out, |quants, aq, k, r, i| {
            let (d, dmin, sc, mn) = job.q4_k_scales(i, r);
            let (mut isum, mut msum) = (0i32, 0i32);
            for s in 0..8 {
                isum += sc[s] as i32 * dot(PackedKind::Q4_K, quants, r, aq, 32 * s..32 * s + 32);
                msum += mn[s] as i32 * job.acts.sub_sums[k * 8 + s] as i32;
            }
            (msum as f32).mul_add(-dmin, isum as f32 * d)
        }),
        PackedKind::Q6_K => k_quant_ref(job, out, |quants, aq, k, r, i| {
            let (d, sc) = job.q6_k_scales(i, r);
            let (mut isum, mut csum) = (0i32, 0i32);
            for (s, &scale) in sc.iter().enumerate() {
                isum += scale as i32 * dot(PackedKind::Q6_K, quants, r, aq, 16 * s..16 * s + 16);
                csum += scale as i32 * job.acts.bsums[k * 16 + s] as i32;
            }
            (isum - 32 * csum) as f32 * d
        }),
        _ => panel_ref(job, out),
    }
}

/// `out[j][r] = Σ_i f32(Σ_e w[r][i][e] · a[j][i][e] − corr[j][i]) · (d_w · d_a)
///              (+ m_w · s_a)` for the job's activation rows (the K-quants: see above).
pub(super) fn panel_ref(job: &PanelJob<'_>, out: &mut PanelOut) {
    match job.kind {
        PackedKind::Q4_K => return panel_q4_k_ref(job, out),
        PackedKind::Q6_K => return panel_q6_k_ref(job, out),
        _ => {}
    }
    let (kind, nb, acts) = (job.kind, job.nb, job.acts);
    for (j, out_j) in out.iter_mut().enumerate().take(job.na) {
        let a = job.j0 + j;
        let aq = &acts.q[a * nb * 32..][..nb * 32];
        for (r, o) in out_j.iter_mut().enumerate().take(PANEL) {
            let mut acc = 0.0f32;
            for i in 0..nb {
                let quants = job.quants(i);
                let dot = dot(kind, quants, r, &aq[i * 32..][..32], 0..32);
                let k = a * nb + i;
                let (dw, mw) = job.weight_scales(i, r);
                acc = ((dot - acts.corr[k]) as f32).mul_add(dw * acts.d[k], acc);
                if kind == PackedKind::Q4_1 {
                    acc = mw.mul_add(acts.s[k], acc);
                }
            }
            *o = acc;
        }
    }
}
