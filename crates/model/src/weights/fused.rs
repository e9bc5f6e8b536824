//! [`FusedSplit`]: a [`TensorSource`] that serves the parts of fused matrices as tensors of
//! their own, so the decoder sees ordinary Q/K/V and gate/up projections.
//!
//! Phi-3 stores `qkv_proj` (rows: all Q heads, then K, then V) and `gate_up_proj` (rows: gate,
//! then up); llama.cpp's converter keeps both fused, as `blk.N.attn_qkv.weight` and
//! `blk.N.ffn_up.weight` with `2 * ffn` rows (gate first). A part is a range of whole rows,
//! which is a contiguous byte range for every tensor type: quantized blocks run along a row.

use std::collections::HashMap;
use std::ops::Range;

use kestrel_kernels::SharedBytes;

use super::{TensorSource, TensorView};
use crate::arch::naming::{LayerTensor, TensorNaming};
use crate::config::ModelConfig;

/// Where a part lives: the fused tensor's name and the part's rows.
#[derive(Debug, Clone)]
struct Part {
    fused: String,
    rows: Range<usize>,
}

/// `inner`, plus the row ranges of its fused tensors under the split names.
pub struct FusedSplit<'a> {
    inner: &'a dyn TensorSource,
    parts: HashMap<String, Part>,
}

impl<'a> FusedSplit<'a> {
    /// The split view of `inner` for `cfg` (names as `naming` spells them). Only fused tensors
    /// that are present and have the fused shape are split; a file that stores the parts apart
    /// reads as it is.
    pub fn new(
        inner: &'a dyn TensorSource,
        cfg: &ModelConfig,
        naming: TensorNaming,
    ) -> FusedSplit<'a> {
        let mut split = FusedSplit {
            inner,
            parts: HashMap::new(),
        };
        if cfg.architecture.splits_fused() {
            for layer in 0..cfg.n_layers {
                split.add_layer(layer, cfg, naming);
            }
        }
        split
    }

    fn add_layer(&mut self, layer: usize, cfg: &ModelConfig, naming: TensorNaming) {
        let q = cfg.n_heads * cfg.head_dim;
        let kv = cfg.n_kv_heads * cfg.head_dim;
        let ffn = cfg.intermediate_size;
        let Some((qkv, gate_up)) = fused_names(naming, layer) else {
            return;
        };
        let part = |t: LayerTensor| naming.layer(layer, t, "weight");
        if self.rows_of(&qkv) == Some(q + 2 * kv) {
            self.add(&qkv, part(LayerTensor::Q), 0..q);
            self.add(&qkv, part(LayerTensor::K), q..q + kv);
            self.add(&qkv, part(LayerTensor::V), q + kv..q + 2 * kv);
        }
        if self.rows_of(&gate_up) == Some(2 * ffn) {
            self.add(&gate_up, part(LayerTensor::Gate), 0..ffn);
            self.add(&gate_up, part(LayerTensor::Up), ffn..2 * ffn);
        }
    }

    fn rows_of(&self, name: &str) -> Option<usize> {
        let view = self.inner.tensor(name)?;
        match view.shape.as_slice() {
            [rows, _] => Some(*rows),
            _ => None,
        }
    }

    fn add(&mut self, fused: &str, name: String, rows: Range<usize>) {
        let fused = fused.to_string();
        self.parts.insert(name, Part { fused, rows });
    }

    /// The number of tensors served as parts of fused ones.
    pub fn n_parts(&self) -> usize {
        self.parts.len()
    }
}

/// The fused Q/K/V and gate/up tensors of `layer` in the GGUF and HF Llama-family namings
/// (a family with a name table of its own that fuses QKV has its model split it itself).
fn fused_names(naming: TensorNaming, layer: usize) -> Option<(String, String)> {
    match naming {
        TensorNaming::Gguf => Some((
            format!("blk.{layer}.attn_qkv.weight"),
            format!("blk.{layer}.ffn_up.weight"),
        )),
        TensorNaming::HuggingFace => Some((
            format!("model.layers.{layer}.self_attn.qkv_proj.weight"),
            format!("model.layers.{layer}.mlp.gate_up_proj.weight"),
        )),
        TensorNaming::HfTable { .. } => None,
    }
}

/// Rows `rows` of the matrix `view`, named `name`; `None` if they are out of range or the row
/// size is not whole blocks.
pub fn row_slice(view: &TensorView, name: &str, rows: Range<usize>) -> Option<TensorView> {
    let [n_rows, cols] = view.shape.as_slice() else {
        return None;
    };
    if rows.end > *n_rows || rows.start > rows.end {
        return None;
    }
    let row_bytes = view.dtype.row_bytes(*cols)?;
    let data = view
        .data
        .slice(rows.start * row_bytes..rows.end * row_bytes)?;
    let data = match (data.as_ptr() as usize).is_multiple_of(4) {
        true => data,
        false => SharedBytes::from_vec(data.to_vec()),
    };
    Some(TensorView {
        name: name.to_string(),
        dtype: view.dtype,
        shape: vec![rows.len(), *cols],
        data,
    })
}

impl TensorSource for FusedSplit<'_> {
    fn tensor(&self, name: &str) -> Option<TensorView> {
        match self.parts.get(name) {
            Some(part) => row_slice(&self.inner.tensor(&part.fused)?, name, part.rows.clone()),
            None => self.inner.tensor(name),
        }
    }

    /// The inner names, the fused tensors replaced by their parts.
    fn tensor_names(&self) -> Vec<String> {
        let fused: Vec<&str> = self.parts.values().map(|p| p.fused.as_str()).collect();
        let mut names: Vec<String> = self
            .inner
            .tensor_names()
            .into_iter()
            .filter(|n| !fused.contains(&n.as_str()))
            .collect();
        let mut parts: Vec<String> = self.parts.keys().cloned().collect();
        parts.sort();
        names.extend(parts);
        names
    }

    fn input_perm(&self, name: &str) -> Option<Vec<u32>> {
        match self.parts.contains_key(name) {
            true => None,
            false => self.inner.input_perm(name),
        }
    }

    fn outlier_columns(&self, name: &str) -> Option<Vec<u32>> {
        match self.parts.contains_key(name) {
            true => None,
            false => self.inner.outlier_columns(name),
        }
    }
}
