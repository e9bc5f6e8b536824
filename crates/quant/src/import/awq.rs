//! AutoAWQ GEMM layout to [`GroupQuant`].
//!
//! For a linear with `out` outputs and `in` inputs, in groups of `g` inputs:
//!
//! ```text
//!  qweight int32 [in, out/8]      codes, transposed: row i holds input i of every output
//!  qzeros  int32 [in/g, out/8]    integer zeros, same packing
//!  scales  f16   [in/g, out]
//!
//!  word c of a row holds outputs 8c..8c+7, interleaved:
//!  field:   f0  f1  f2  f3  f4  f5  f6  f7      (f0 = bits 0..3)
//!  output:  +0  +2  +4  +6  +1  +3  +5  +7
//!
//!  w[o][i] = (code - zero) * scale,   zero and scale of group i / g
//! ```

use kestrel_model::weights::safetensors::SafetensorsCheckpoint;

use crate::codec::GroupQuant;

use super::packed::{field, floats, multiple, transpose, words};
use super::{ImportError, QuantConfig};

/// The field of a packed word holding output `8c + k`, indexed by `k`: the inverse of AWQ's
/// packing order `[0, 2, 4, 6, 1, 3, 5, 7]`.
const FIELD_OF_OUTPUT: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];

/// Read the AWQ GEMM linear `prefix` of shape `[rows, cols]` (outputs, inputs).
pub(crate) fn read(
    ckpt: &SafetensorsCheckpoint,
    cfg: &QuantConfig,
    prefix: &str,
    rows: usize,
    cols: usize,
) -> Result<GroupQuant, ImportError> {
    if cfg.bits != 4 {
        return Err(ImportError::UnsupportedBits {
            method: "AWQ",
            bits: i64::from(cfg.bits),
            supported: "4",
        });
    }
    let group = cfg.group_size_for(cols);
    let groups = multiple(prefix, "input features", cols, group)?;
    let packed = multiple(prefix, "output features", rows, 8)?;
    let qweight = words(ckpt, &format!("{prefix}.qweight"), &[cols, packed])?;
    let qzeros = words(ckpt, &format!("{prefix}.qzeros"), &[groups, packed])?;
    let scales = floats(ckpt, &format!("{prefix}.scales"), &[groups, rows])?;
    Ok(GroupQuant {
        rows,
        cols,
        bits: 4,
        group_size: group,
        codes: unpack_transposed(&qweight, cols, rows),
        scales: transpose(&scales, groups, rows),
        zeros: unpack_transposed(&qzeros, groups, rows),
        perm: None,
    })
}

/// `[n, rows/8]` words in AWQ order to `[rows][n]` 4-bit values, one per byte.
fn unpack_transposed(packed: &[u32], n: usize, rows: usize) -> Vec<u8> {
    let per_row = rows / 8;
    let mut out = vec![0u8; rows * n];
    for i in 0..n {
        let words = &packed[i * per_row..(i + 1) * per_row];
        for o in 0..rows {
            out[o * n + i] = field(words[o / 8], FIELD_OF_OUTPUT[o % 8], 4);
        }
    }
    out
}
