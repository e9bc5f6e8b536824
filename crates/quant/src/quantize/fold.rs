//! [`fold_scales`]: per-input-channel scales folded into a model without changing the function
//! the unquantized model computes (AWQ's scales, SmoothQuant's smoothing): the matrices reading
//! a site get their columns multiplied, the producer of their input its rows divided.

use std::collections::HashMap;

use kestrel_model::arch::LinearSite;

use super::awq::{scale_columns, unscale_rows, Weight};
use super::calib::{Calibration, SiteStats};
use super::QuantizeError;
use crate::convert::ModelSource;

/// Chooses per-input-channel scales for the matrices reading one site.
pub(super) type ChooseScales<'a> = dyn Fn(&SiteStats, &[Weight<'_>], usize) -> Vec<f32> + 'a;

/// Scale the inputs of every layer's linear groups by `choose`'s scales: the matrices' columns
/// are multiplied by `s` and the producer of their input (a norm weight, or the rows of the up
/// projection) divided by it, so the unquantized model computes the same function. Returns the
/// transformed `f32` values of every changed tensor and the scales of every site.
///
/// With `tie_gqa`, the attention output projection is scaled too under grouped-query
/// attention: query heads that share a V head share their scales (geometric mean), and the
/// inverse goes into that V head's rows.
pub(super) fn fold_scales(
    source: &ModelSource,
    calib: &Calibration,
    choose: &ChooseScales<'_>,
    tie_gqa: bool,
) -> Result<Folded, QuantizeError> {
    let mut out: HashMap<String, Vec<f32>> = HashMap::new();
    let mut applied = HashMap::new();
    let cfg = &source.config;
    let heads_per_kv = cfg.n_heads / cfg.n_kv_heads.max(1);
    for layer in 0..source.config.n_layers {
        let name = |role: &str| format!("blk.{layer}.{role}.weight");
        let mut groups: Vec<(LinearSite, Vec<&str>, &str)> = vec![
            (
                LinearSite::Qkv,
                vec!["attn_q", "attn_k", "attn_v"],
                "attn_norm",
            ),
            (LinearSite::GateUp, vec!["ffn_gate", "ffn_up"], "ffn_norm"),
            (LinearSite::Down, vec!["ffn_down"], "ffn_up"),
        ];
        if tie_gqa || heads_per_kv == 1 {
            groups.push((LinearSite::O, vec!["attn_output"], "attn_v"));
        }
        for (site, targets, producer) in groups {
            let stats = calib.site(layer, site).ok_or_else(|| {
                QuantizeError::Calibration(format!(
                    "no calibration statistics for layer {layer} {site:?}"
                ))
            })?;
            let mut ws: Vec<Vec<f32>> = targets
                .iter()
                .map(|r| take(&mut out, source, &name(r)))
                .collect::<Result<_, _>>()?;
            let cols = stats.cols;
            let weights: Vec<Weight<'_>> = ws
                .iter()
                .map(|w| Weight {
                    values: w,
                    rows: w.len() / cols,
                })
                .collect();
            let mut s = choose(stats, &weights, cols);
            let mut prod = take(&mut out, source, &name(producer))?;
            if site == LinearSite::O && heads_per_kv > 1 {
                let (kv_scales, tied) = tie_to_kv_heads(&s, cfg.head_dim, heads_per_kv);
                unscale_rows(&mut prod, &kv_scales);
                s = tied;
            } else {
                unscale_rows(&mut prod, &s);
            }
            out.insert(name(producer), prod);
            for (role, w) in targets.iter().zip(ws.iter_mut()) {
                scale_columns(w, &s);
                out.insert(name(role), std::mem::take(w));
            }
            applied.insert((layer, site), s);
        }
    }
    Ok((out, applied))
}

/// Transformed tensors by name, and the input scales applied at each site.
pub(super) type Folded = (
    HashMap<String, Vec<f32>>,
    HashMap<(usize, LinearSite), Vec<f32>>,
);

/// Per-KV-head scales (`[kv_heads * head_dim]`, geometric mean over the query heads sharing
/// each KV head) and those scales expanded back to every query head's channels.
fn tie_to_kv_heads(s: &[f32], head_dim: usize, heads_per_kv: usize) -> (Vec<f32>, Vec<f32>) {
    let n_kv = s.len() / (head_dim * heads_per_kv);
    let mut kv = vec![0f32; n_kv * head_dim];
    for (g, chunk) in kv.chunks_exact_mut(head_dim).enumerate() {
        for (d, v) in chunk.iter_mut().enumerate() {
            let log_sum: f32 = (0..heads_per_kv)
                .map(|h| s[((g * heads_per_kv + h) * head_dim) + d].ln())
                .sum();
            *v = (log_sum / heads_per_kv as f32).exp();
        }
    }
    let tied = (0..s.len())
        .map(|i| kv[(i / (head_dim * heads_per_kv)) * head_dim + i % head_dim])
        .collect();
    (kv, tied)
}

/// The current values of tensor `name`: already transformed ones from `out`, else the source's.
fn take(
    out: &mut HashMap<String, Vec<f32>>,
    source: &ModelSource,
    name: &str,
) -> Result<Vec<f32>, QuantizeError> {
    if let Some(v) = out.remove(name) {
        return Ok(v);
    }
    let t = source
        .tensors
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| QuantizeError::Calibration(format!("tensor {name} is missing")))?;
    Ok(t.to_f32()?)
}

#[cfg(test)]
mod tests {
    use super::tie_to_kv_heads;

    #[test]
    fn gqa_scales_are_shared_by_the_heads_of_a_kv_head() {
        // 4 query heads of dim 2 sharing 2 KV heads.
        let s = [1.0, 4.0, 4.0, 1.0, 2.0, 2.0, 8.0, 2.0];
        let (kv, tied) = tie_to_kv_heads(&s, 2, 2);
        let close = |a: f32, b: f32| (a - b).abs() < 1e-5;
        assert!(
            close(kv[0], 2.0) && close(kv[1], 2.0) && close(kv[2], 4.0) && close(kv[3], 2.0),
            "{kv:?}"
        );
        assert!(
            tied.iter()
                .zip([2.0, 2.0, 2.0, 2.0, 4.0, 2.0, 4.0, 2.0])
                .all(|(a, b)| close(*a, b)),
            "{tied:?}"
        );
    }
}
