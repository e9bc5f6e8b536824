//! [`pack`]: a [`GroupQuant`] into the bytes of a Kestrel tensor type — INT4_G* for 4-bit
//! codes (the group size picks the type), INT8 for symmetric 8-bit per-channel codes.

use kestrel_kernels::quant::{int4, int8};
use kestrel_kernels::DType;

use super::GroupQuant;

/// Why a [`GroupQuant`] has no Kestrel tensor type.
#[derive(Debug, thiserror::Error)]
#[error("invalid quantization option: {0}")]
pub struct PackError(pub String);

/// A linear layer's weights as stored: their type, their bytes and, when the columns are
/// stored permuted (GPTQ act-order), the permutation.
pub type PackedLinear = (DType, Vec<u8>, Option<Vec<u32>>);

/// The tensor type and bytes holding `q` (stored column order; a permutation travels
/// separately).
pub fn pack(q: &GroupQuant) -> Result<(DType, Vec<u8>), PackError> {
    match q.bits {
        4 => pack_int4(q),
        8 => pack_int8(q),
        b => Err(PackError(format!(
            "{b}-bit codes have no Kestrel tensor type"
        ))),
    }
}

fn pack_int4(q: &GroupQuant) -> Result<(DType, Vec<u8>), PackError> {
    let dtype = int4::dtype_for_group(q.group_size).ok_or_else(|| {
        PackError(format!(
            "INT4 group size {} (Kestrel has 32, 64 and 128)",
            q.group_size
        ))
    })?;
    let row_bytes = dtype.row_bytes(q.cols).ok_or_else(|| {
        PackError(format!(
            "{} columns are not whole groups of {}",
            q.cols, q.group_size
        ))
    })?;
    let groups = q.groups();
    let mut out = vec![0u8; q.rows * row_bytes];
    for (r, dst) in out.chunks_exact_mut(row_bytes).enumerate() {
        let g = r * groups..(r + 1) * groups;
        let codes = &q.codes[r * q.cols..(r + 1) * q.cols];
        int4::encode_row(q.group_size, &q.scales[g.clone()], &q.zeros[g], codes, dst);
    }
    Ok((dtype, out))
}

/// 8-bit codes must be symmetric per channel (zero 128, one group per row).
fn pack_int8(q: &GroupQuant) -> Result<(DType, Vec<u8>), PackError> {
    if q.group_size != q.cols || q.zeros.iter().any(|z| *z != 128) {
        return Err(PackError(
            "8-bit codes need one symmetric group per row (INT8 is per-channel symmetric)".into(),
        ));
    }
    let row_bytes = DType::INT8
        .row_bytes(q.cols)
        .ok_or_else(|| PackError(format!("{} columns are not a multiple of 32", q.cols)))?;
    let mut out = vec![0u8; q.rows * row_bytes];
    let mut signed = vec![0i8; q.cols];
    for (r, dst) in out.chunks_exact_mut(row_bytes).enumerate() {
        let codes = &q.codes[r * q.cols..(r + 1) * q.cols];
        signed
            .iter_mut()
            .zip(codes)
            .for_each(|(s, c)| *s = (*c as i16 - 128) as i8);
        int8::encode_row(q.scales[r], &signed, dst);
    }
    Ok((DType::INT8, out))
}
