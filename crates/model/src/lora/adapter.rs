//! [`LoraAdapter`]: an adapter fitted to a base model: per layer and projection an optional
//! [`LoraPair`], with fused modules split and Q/K rows in the base's order.

use std::path::Path;

use super::base::LoraBase;
use super::error::LoraError;
use super::gguf_lora::load_gguf_lora;
use super::pair::LoraPair;
use super::peft::load_peft;
use super::raw::{LoraSource, RawLora};
use super::target::LoraTarget;
use crate::qk_rows::{gguf_to_hf, hf_to_gguf};

#[derive(Debug, Clone)]
pub struct LoraAdapter {
    name: String,
    /// `layers[l][target.index()]`.
    layers: Vec<[Option<LoraPair>; 7]>,
}

impl LoraAdapter {
    /// Read the adapter at `path` (a PEFT directory or a llama.cpp adapter `.gguf`) and fit it
    /// to `base`.
    pub fn open(name: &str, path: &Path, base: &LoraBase) -> Result<LoraAdapter, LoraError> {
        let raw = match path.is_dir() {
            true => load_peft(path)?,
            false => load_gguf_lora(path)?,
        };
        LoraAdapter::bind(name, raw, base)
    }

    /// Fit `raw` to `base`: every pair must name a projection the base has, with its shape;
    /// fused pairs split into their projections' row blocks (sharing A); Q/K deltas are
    /// reordered when the adapter's row order is not the base's.
    pub fn bind(name: &str, raw: RawLora, base: &LoraBase) -> Result<LoraAdapter, LoraError> {
        let mut layers: Vec<[Option<LoraPair>; 7]> = vec![Default::default(); base.n_layers()];
        let permuted = raw.source == LoraSource::LlamaCpp && base.arch_permutes;
        for p in &raw.pairs {
            let mut row = 0;
            for &t in p.module.targets() {
                let not_in_base = || LoraError::NotInBase {
                    layer: p.layer,
                    module: p.module.name(),
                };
                let (rows, cols) = base.shape(p.layer, t).ok_or_else(not_in_base)?;
                let fused_rows: usize = p
                    .module
                    .targets()
                    .iter()
                    .map(|&t| base.shape(p.layer, t).map_or(0, |s| s.0))
                    .sum();
                if p.cols != cols || p.rows != fused_rows {
                    return Err(LoraError::ShapeMismatch {
                        tensor: p.name.clone(),
                        expected: vec![fused_rows, cols],
                        actual: vec![p.rows, p.cols],
                    });
                }
                let b = &p.b[row * p.rank..(row + rows) * p.rank];
                let b = fix_qk_rows(t, b, p.rank, base, permuted);
                layers[p.layer][t.index()] = Some(LoraPair::new(
                    &p.name,
                    (&p.a, &b),
                    (p.rank, rows, cols),
                    p.scale,
                )?);
                row += rows;
            }
        }
        Ok(LoraAdapter {
            name: name.to_string(),
            layers,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The largest rank of its deltas.
    pub fn rank(&self) -> usize {
        self.targets().map(|(_, _, p)| p.rank()).max().unwrap_or(0)
    }

    /// The delta of `target` in `layer`, if the adapter changes it.
    pub fn pair(&self, layer: usize, target: LoraTarget) -> Option<&LoraPair> {
        self.layers.get(layer)?[target.index()].as_ref()
    }

    /// The (layer, projection) pairs the adapter changes.
    pub fn targets(&self) -> impl Iterator<Item = (usize, LoraTarget, &LoraPair)> {
        self.layers.iter().enumerate().flat_map(|(l, ts)| {
            LoraTarget::ALL
                .into_iter()
                .filter_map(move |t| ts[t.index()].as_ref().map(|p| (l, t, p)))
        })
    }
}

/// B's rows of a Q or K delta in the base's order (`permuted`: the adapter's are in
/// llama.cpp's order).
fn fix_qk_rows(t: LoraTarget, b: &[f32], rank: usize, base: &LoraBase, permuted: bool) -> Vec<f32> {
    let heads = match t {
        LoraTarget::Q => base.n_heads,
        LoraTarget::K => base.n_kv_heads,
        _ => return b.to_vec(),
    };
    match (permuted, base.qk_permuted) {
        (false, true) => hf_to_gguf(b, heads, rank),
        (true, false) => gguf_to_hf(b, heads, rank),
        _ => b.to_vec(),
    }
}
