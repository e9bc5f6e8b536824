//! The scalar panel kernel: the spec of the packed product. It performs the `f32` operations
//! of the SIMD kernels in the same order (one fused multiply-add per block, and one more for
//! Q4_1's minimum; for the K-quants one per sub-block, one for the minimums or offsets and one
//! per super-block),
//! so their results are bit-identical to it.

use super::layout::packed_quant;
use super::{PackedKind, PanelJob, PanelOut, PANEL};

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
    let (nb, acts) = (job.nb, job.acts);
    for (j, out_j) in out.iter_mut().enumerate().take(job.na) {
        let a = job.j0 + j;
        let aq = &acts.q[a * nb * 256..][..nb * 256];
        for (r, o) in out_j.iter_mut().enumerate().take(PANEL) {
            let mut acc = 0.0f32;
            for i in 0..nb {
                let quants = job.quants(i);
                let k = a * nb + i;
                let (d, dmin, sc, mn) = job.q4_k_scales(i, r);
                let mut t = 0.0f32;
                let mut msum = 0i32;
                for s in 0..8 {
                    let isum: i32 = (32 * s..32 * s + 32)
                        .map(|e| {
                            packed_quant(PackedKind::Q4_K, quants, r, e) as i32
                                * aq[i * 256 + e] as i32
                        })
                        .sum();
                    t = (isum as f32).mul_add(d * sc[s] as f32, t);
                    msum += mn[s] as i32 * acts.sub_sums[k * 8 + s] as i32;
                }
                t = (msum as f32).mul_add(-dmin, t);
                acc = t.mul_add(acts.d[k], acc);
            }
            *o = acc;
        }
    }
}

/// `out[j][r] = Σ_i f32(Σ_e w[r][i][e] · a[j][i][e] − corr[j][i]) · (d_w · d_a)
///              (+ m_w · s_a)` for the job's activation rows.
/// The product of a Q6_K panel: per super-block `i`, with `isum_s` the integer dot product of
/// sub-block `s` (16 values) with the quants as stored (0..=63), and
/// `csum = Σ_s sc[s] · (activation quant sum of sub-block s)`:
///
/// ```text
///   t = 0;  for s in 0..16:  t = fma(f32(isum_s), d · f32(sc[s]), t)   (d · sc exact in f32)
///   t = fma(f32(csum), −32 · d, t)          (the stored quants are 32 above the signed ones)
///   acc = fma(t, d_a, acc)
/// ```
fn panel_q6_k_ref(job: &PanelJob<'_>, out: &mut PanelOut) {
    let (nb, acts) = (job.nb, job.acts);
    for (j, out_j) in out.iter_mut().enumerate().take(job.na) {
        let a = job.j0 + j;
        let aq = &acts.q[a * nb * 256..][..nb * 256];
        for (r, o) in out_j.iter_mut().enumerate().take(PANEL) {
            let mut acc = 0.0f32;
            for i in 0..nb {
                let quants = job.quants(i);
                let k = a * nb + i;
                let (d, sc) = job.q6_k_scales(i, r);
                let mut t = 0.0f32;
                let mut csum = 0i32;
                for (s, &scale) in sc.iter().enumerate() {
                    let isum: i32 = (16 * s..16 * s + 16)
                        .map(|e| {
                            packed_quant(PackedKind::Q6_K, quants, r, e) as i32
                                * aq[i * 256 + e] as i32
                        })
                        .sum();
                    t = (isum as f32).mul_add(d * scale as f32, t);
                    csum += scale as i32 * acts.bsums[k * 16 + s] as i32;
                }
                t = (csum as f32).mul_add(-32.0 * d, t);
                acc = t.mul_add(acts.d[k], acc);
            }
            *o = acc;
        }
    }
}

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
                let dot: i32 = (0..32)
                    .map(|e| packed_quant(kind, quants, r, e) as i32 * aq[i * 32 + e] as i32)
                    .sum();
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
