//! The scalar panel kernel: the spec of the packed product. It performs the `f32` operations
//! of the SIMD kernels in the same order (one fused multiply-add per block, and one more for
//! Q4_1's minimum), so their results are bit-identical to it.

use super::layout::packed_quant;
use super::{PackedKind, PanelJob, PanelOut, PANEL};

/// `out[j][r] = Σ_i f32(Σ_e w[r][i][e] · a[j][i][e] − corr[j][i]) · (d_w · d_a)
///              (+ m_w · s_a)` for the job's activation rows.
pub(super) fn panel_ref(job: &PanelJob<'_>, out: &mut PanelOut) {
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
