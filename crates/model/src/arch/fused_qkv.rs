//! [`FusedQkv`]: a fused `[3·q_dim, hidden]` query/key/value projection (BLOOM's
//! `query_key_value`, GGUF `attn_qkv`) split at load into three row ranges, so attention runs
//! the same q, k and v [`Linear`]s as every other family.
//!
//! ```text
//!   QkvOrder::Blocked (GGUF):  rows [q_0 .. q_{n-1} | k_0 .. k_{n-1} | v_0 .. v_{n-1}]
//!   QkvOrder::PerHead (HF):    rows [q_0 k_0 v_0 | q_1 k_1 v_1 | ...]   each part head_dim rows
//! ```
//!
//! Blocked parts are zero-copy slices of the stored bytes; per-head parts are gathered rows.
//! Whole rows are copied in their stored type, so any row-blocked dtype splits.

use super::naming::QkvOrder;
use crate::error::ModelError;
use crate::layers::{to_f32_vec, Linear};
use crate::weights::TensorView;

/// The q, k and v projections of a fused QKV weight.
pub(crate) struct FusedQkv {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
}

impl FusedQkv {
    /// Split `weight` (`[3·n_heads·head_dim, hidden]`, rows in `order`) and its optional
    /// `bias` the same way.
    pub fn split(
        weight: &TensorView,
        bias: Option<&TensorView>,
        order: QkvOrder,
        (n_heads, head_dim): (usize, usize),
    ) -> Result<FusedQkv, ModelError> {
        let bias = bias.map(to_f32_vec).transpose()?;
        let part = |p: usize| -> Result<Linear, ModelError> {
            let rows = part_rows(order, n_heads, head_dim, p);
            let view = gather_rows(weight, &rows)?;
            let b = bias.as_ref().map(|b| {
                rows.iter()
                    .flat_map(|r| b[r.clone()].iter().copied())
                    .collect()
            });
            Ok(Linear::new(view, b)?.packed())
        };
        Ok(FusedQkv {
            q: part(0)?,
            k: part(1)?,
            v: part(2)?,
        })
    }
}

/// The row ranges of part `p` (0 = q, 1 = k, 2 = v), in output order.
fn part_rows(
    order: QkvOrder,
    n_heads: usize,
    head_dim: usize,
    p: usize,
) -> Vec<std::ops::Range<usize>> {
    let q_dim = n_heads * head_dim;
    match order {
        QkvOrder::Blocked => std::iter::once(p * q_dim..(p + 1) * q_dim).collect(),
        QkvOrder::PerHead => (0..n_heads)
            .map(|h| (3 * h + p) * head_dim..(3 * h + p + 1) * head_dim)
            .collect(),
    }
}

/// The `rows` of the `[r, c]` matrix `view`, as a new `[Σ rows, c]` tensor.
fn gather_rows(
    view: &TensorView,
    rows: &[std::ops::Range<usize>],
) -> Result<TensorView, ModelError> {
    let (r, c) = match view.shape[..] {
        [r, c] => (r, c),
        _ => {
            return Err(ModelError::BadTensor {
                name: view.name.clone(),
                reason: format!("a fused QKV weight must be 2-D, not {:?}", view.shape),
            })
        }
    };
    let bad = |reason: String| ModelError::BadTensor {
        name: view.name.clone(),
        reason,
    };
    let rb = view
        .dtype
        .row_bytes(c)
        .ok_or_else(|| bad(format!("{c} columns are not whole {} blocks", view.dtype)))?;
    if view.data.len() != r * rb || rows.iter().any(|x| x.end > r) {
        return Err(bad(format!(
            "{} bytes for [{r}, {c}] {}",
            view.data.len(),
            view.dtype
        )));
    }
    let n: usize = rows.iter().map(|x| x.len()).sum();
    let data = match rows {
        [one] => view.data.slice(one.start * rb..one.end * rb),
        _ => None,
    };
    let data = data.unwrap_or_else(|| {
        let mut bytes = Vec::with_capacity(n * rb);
        for x in rows {
            bytes.extend_from_slice(&view.data[x.start * rb..x.end * rb]);
        }
        kestrel_kernels::SharedBytes::from_vec(bytes)
    });
    Ok(TensorView {
        name: view.name.clone(),
        dtype: view.dtype,
        shape: vec![n, c],
        data,
    })
}
