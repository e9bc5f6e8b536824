//! [`QuantizedCheckpoint`]: an AWQ/GPTQ checkpoint as a [`TensorSource`] whose quantized
//! linears appear as ordinary `<prefix>.weight` matrices in Kestrel's types — the packed codes
//! are repacked, not dequantized:
//!
//! * 4-bit codes → INT4_G32/64/128 (a larger group, or one group per row, is split into
//!   equal groups of the largest supported size that divides it: exact);
//! * 8-bit symmetric per-channel codes → INT8 (exact);
//! * other 8-bit layouts (per-group scales) → Q8_0, re-rounded to Q8_0's own grid (the one
//!   lossy case: error below half a Q8_0 step).
//!
//! GPTQ act-order permutations travel through [`TensorSource::input_perm`].

use std::collections::HashMap;
use std::sync::Mutex;

use kestrel_kernels::{DType, SharedBytes};
use kestrel_model::weights::safetensors::SafetensorsCheckpoint;
use kestrel_model::weights::{TensorSource, TensorView};

use super::{is_quantized_linear, read_linear, ImportError, QuantConfig};
use crate::codec::{encode_rows, pack, GroupQuant, PackedLinear};

/// A checkpoint with packed linears.
pub struct QuantizedCheckpoint {
    inner: SafetensorsCheckpoint,
    cfg: QuantConfig,
    /// Errors are remembered so the loader can report the real cause instead of "missing".
    failures: Mutex<HashMap<String, String>>,
    perms: Mutex<HashMap<String, Vec<u32>>>,
}

impl QuantizedCheckpoint {
    pub fn new(inner: SafetensorsCheckpoint, cfg: QuantConfig) -> QuantizedCheckpoint {
        QuantizedCheckpoint {
            inner,
            cfg,
            failures: Mutex::default(),
            perms: Mutex::default(),
        }
    }

    pub fn config(&self) -> &QuantConfig {
        &self.cfg
    }

    /// Why `name` could not be produced, if it failed.
    pub fn failure(&self, name: &str) -> Option<String> {
        self.failures.lock().ok()?.get(name).cloned()
    }

    /// `(rows, cols)` of the packed linear `prefix`, from its `scales` tensor (`[groups, out]`)
    /// and `qweight` (AWQ `[in, out/8]`; GPTQ `[in·bits/32, out]`).
    fn dims(&self, prefix: &str) -> Option<(usize, usize)> {
        let qweight = self.inner.raw_tensor(&format!("{prefix}.qweight"))?;
        let scales = self.inner.raw_tensor(&format!("{prefix}.scales"))?;
        let rows = *scales.shape.get(1)?;
        let cols = match self.cfg.method {
            super::ImportMethod::Awq => *qweight.shape.first()?,
            super::ImportMethod::Gptq => qweight.shape.first()? * 32 / self.cfg.bits as usize,
        };
        Some((rows, cols))
    }

    fn repacked(&self, name: &str, prefix: &str) -> Result<TensorView, ImportError> {
        let (rows, cols) = self
            .dims(prefix)
            .ok_or_else(|| ImportError::MissingTensor(format!("{prefix}.qweight/.scales")))?;
        let q = read_linear(&self.inner, &self.cfg, prefix, rows, cols)?;
        let (dtype, bytes, perm) = to_kestrel(q)?;
        if let (Some(p), Ok(mut perms)) = (perm, self.perms.lock()) {
            perms.insert(name.to_string(), p);
        }
        Ok(TensorView {
            name: name.to_string(),
            dtype,
            shape: vec![rows, cols],
            data: SharedBytes::from_vec(bytes),
        })
    }
}

/// The Kestrel type, bytes and permutation holding `q`.
fn to_kestrel(q: GroupQuant) -> Result<PackedLinear, ImportError> {
    let symmetric_rows = q.bits == 8 && q.group_size == q.cols && q.zeros.iter().all(|z| *z == 128);
    if q.bits == 8 && !symmetric_rows {
        let values = q.dequantize();
        return Ok((DType::Q8_0, encode_rows(DType::Q8_0, &values, q.cols), None));
    }
    let q = if q.bits == 4 { regroup(q) } else { q };
    let perm = q.perm.clone();
    let (dtype, bytes) = pack(&q).map_err(|e| ImportError::Repack(e.to_string()))?;
    Ok((dtype, bytes, perm))
}

/// Split every group into equal groups of the largest supported size (128, 64, 32) dividing
/// it; scales and zeros repeat, so the values are unchanged.
fn regroup(q: GroupQuant) -> GroupQuant {
    let Some(g) = [128, 64, 32]
        .into_iter()
        .find(|g| q.group_size.is_multiple_of(*g))
    else {
        return q;
    };
    let k = q.group_size / g;
    if k == 1 {
        return q;
    }
    let repeat = |v: &[f32]| {
        v.iter()
            .flat_map(|x| std::iter::repeat_n(*x, k))
            .collect::<Vec<_>>()
    };
    let scales = repeat(&q.scales);
    let zeros = q
        .zeros
        .iter()
        .flat_map(|z| std::iter::repeat_n(*z, k))
        .collect();
    GroupQuant {
        group_size: g,
        scales,
        zeros,
        ..q
    }
}

impl TensorSource for QuantizedCheckpoint {
    fn tensor(&self, name: &str) -> Option<TensorView> {
        if let Some(prefix) = name
            .strip_suffix(".weight")
            .filter(|p| is_quantized_linear(&self.inner, p))
        {
            return match self.repacked(name, prefix) {
                Ok(v) => Some(v),
                Err(e) => {
                    if let Ok(mut f) = self.failures.lock() {
                        f.insert(name.to_string(), e.to_string());
                    }
                    None
                }
            };
        }
        self.inner.tensor(name)
    }

    fn tensor_names(&self) -> Vec<String> {
        let mut names = self.inner.tensor_names();
        for raw in self.inner.raw_tensor_names() {
            if let Some(prefix) = raw.strip_suffix(".qweight") {
                names.push(format!("{prefix}.weight"));
            }
        }
        names
    }

    fn input_perm(&self, name: &str) -> Option<Vec<u32>> {
        self.perms.lock().ok()?.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regroup_keeps_values() {
        let q = GroupQuant {
            rows: 1,
            cols: 256,
            bits: 4,
            group_size: 256,
            codes: (0..256).map(|i| (i % 16) as u8).collect(),
            scales: vec![0.5],
            zeros: vec![3],
            perm: None,
        };
        let r = regroup(q.clone());
        assert_eq!(r.group_size, 128);
        assert_eq!(r.dequantize(), q.dequantize());
    }
}
