//! gpt-oss's HF expert tensors ([`HfMoeLayout::FusedGateUp`](super::moe_naming::HfMoeLayout)):
//! all experts of a layer in one tensor per projection, input-major —
//!
//! * `gate_up_proj` `[experts, hidden, 2·ffn]`, gate and up interleaved along the output
//!   (output `2i` is gate row `i`, `2i + 1` up row `i`), `gate_up_proj_bias` `[experts, 2·ffn]`;
//! * `down_proj` `[experts, ffn, hidden]`, `down_proj_bias` `[experts, hidden]` —
//!
//! read into per-expert `[rows, cols]` f32 matrices (gate, up, down) with their biases.

use kestrel_kernels::{DType, SharedBytes};

use super::moe_block::ExpertMlp;
use super::moe_naming::MoeTensor;
use super::tensor_loader::TensorLoader;
use crate::config::Architecture;
use crate::error::ModelError;
use crate::layers::{to_f32_vec, Linear};
use crate::weights::TensorView;

/// The sizes of one layer's experts.
pub(crate) struct ExpertDims {
    pub n: usize,
    pub hidden: usize,
    pub ffn: usize,
}

/// Layer `layer`'s experts, from the fused tensors.
pub(crate) fn load(
    ld: &TensorLoader<'_>,
    arch: Architecture,
    layer: usize,
    d: &ExpertDims,
) -> Result<Vec<ExpertMlp>, ModelError> {
    let (n, h, f) = (d.n, d.hidden, d.ffn);
    let read = |t: MoeTensor, shape: &[usize]| {
        to_f32_vec(&ld.get(&ld.naming.moe(arch, layer, t, 0), shape)?)
    };
    let read_bias = |t: MoeTensor, shape: &[usize]| {
        to_f32_vec(&ld.get(&ld.naming.moe_bias(arch, layer, t), shape)?)
    };
    let gate_up = read(MoeTensor::ExpertGate, &[n, h, 2 * f])?;
    let gate_up_bias = read_bias(MoeTensor::ExpertGate, &[n, 2 * f])?;
    let down = read(MoeTensor::ExpertDown, &[n, f, h])?;
    let down_bias = read_bias(MoeTensor::ExpertDown, &[n, h])?;
    let name = ld.naming.moe(arch, layer, MoeTensor::ExpertGate, 0);
    let (mut gates, mut ups, mut downs) = (Vec::new(), Vec::new(), Vec::new());
    for e in 0..n {
        let gu = &gate_up[e * h * 2 * f..][..h * 2 * f];
        let gub = &gate_up_bias[e * 2 * f..][..2 * f];
        let at = |name: &str, part: &str| format!("{name}[{e}].{part}");
        gates.push(matrix(
            at(&name, "gate"),
            transpose_cols(gu, h, 2 * f, 0, 2),
            f,
            h,
            odd_even(gub, 0),
        )?);
        ups.push(matrix(
            at(&name, "up"),
            transpose_cols(gu, h, 2 * f, 1, 2),
            f,
            h,
            odd_even(gub, 1),
        )?);
        let dn = &down[e * f * h..][..f * h];
        let bias = down_bias[e * h..][..h].to_vec();
        downs.push(matrix(
            at(&name, "down"),
            transpose_cols(dn, f, h, 0, 1),
            h,
            f,
            bias,
        )?);
    }
    let experts = Linear::packed_group(gates)
        .into_iter()
        .zip(Linear::packed_group(ups))
        .zip(Linear::packed_group(downs))
        .map(|((gate, up), down)| ExpertMlp { gate, up, down })
        .collect();
    Ok(experts)
}

/// Of an input-major `[rows_in, cols]` matrix, the columns `first, first + step, …` as the
/// rows of an output-major matrix (`[cols / step, rows_in]`).
fn transpose_cols(m: &[f32], rows_in: usize, cols: usize, first: usize, step: usize) -> Vec<f32> {
    let out_rows = (cols - first).div_ceil(step);
    let mut out = Vec::with_capacity(out_rows * rows_in);
    for c in (first..cols).step_by(step) {
        out.extend((0..rows_in).map(|r| m[r * cols + c]));
    }
    out
}

/// Every other value from `first` (the gate or up half of an interleaved bias).
fn odd_even(v: &[f32], first: usize) -> Vec<f32> {
    v.iter().skip(first).step_by(2).copied().collect()
}

/// An f32 `[rows, cols]` linear with `bias`.
fn matrix(
    name: String,
    values: Vec<f32>,
    rows: usize,
    cols: usize,
    bias: Vec<f32>,
) -> Result<Linear, ModelError> {
    let view = TensorView {
        name,
        dtype: DType::F32,
        shape: vec![rows, cols],
        data: SharedBytes::from_f32(&values),
    };
    Linear::new(view, Some(bias))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_columns_become_gate_and_up_rows() {
        // [rows_in = 2, cols = 4]: columns g0 u0 g1 u1.
        let m = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        assert_eq!(transpose_cols(&m, 2, 4, 0, 2), [1.0, 5.0, 3.0, 7.0]);
        assert_eq!(transpose_cols(&m, 2, 4, 1, 2), [2.0, 6.0, 4.0, 8.0]);
        assert_eq!(transpose_cols(&m, 2, 4, 0, 1)[2..4], [2.0, 6.0]);
        assert_eq!(odd_even(&[1.0, 2.0, 3.0, 4.0], 1), [2.0, 4.0]);
    }
}
