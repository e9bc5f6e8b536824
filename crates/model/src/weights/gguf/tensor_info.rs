//! [`GgufTensorInfo`] and the checks that turn raw tensor info records into trusted ones:
//! known type, sane dimensions, aligned, in bounds, no overlaps, no duplicate names.

use std::collections::HashMap;

use kestrel_kernels::DType;

use super::error::GgufError;
use super::parse::RawTensorInfo;

/// One tensor's description, validated against the file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` (ne0) is the innermost, contiguous one.
    pub dims: Vec<u64>,
    pub dtype: DType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub size_bytes: u64,
}

impl GgufTensorInfo {
    /// The shape in row-major order (outermost first): `dims` reversed.
    pub fn shape(&self) -> Vec<usize> {
        // Every dimension was checked to fit in `usize` when the file was opened.
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Total number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// Where the tensor data lives, for bounds checks.
pub(super) struct DataSection {
    pub start: usize,
    pub file_size: usize,
    pub alignment: usize,
}

/// Validate every raw tensor info and return them in file order, plus a name index.
pub(super) fn validate_tensors(
    raw: Vec<RawTensorInfo>,
    data: &DataSection,
) -> Result<(Vec<GgufTensorInfo>, HashMap<String, usize>), GgufError> {
    let mut infos = Vec::with_capacity(raw.len());
    let mut index = HashMap::with_capacity(raw.len());
    for r in raw {
        let info = validate_one(r, data)?;
        if index.insert(info.name.clone(), infos.len()).is_some() {
            return Err(GgufError::DuplicateTensor { name: info.name });
        }
        infos.push(info);
    }
    check_overlaps(&infos)?;
    Ok((infos, index))
}

/// The GGUF tensor types Kestrel reads, comma-separated.
fn supported_types() -> String {
    let names: Vec<&str> = DType::ALL
        .iter()
        .filter(|t| !t.is_kestrel_only())
        .map(|t| t.name())
        .collect();
    names.join(", ")
}

fn validate_one(raw: RawTensorInfo, data: &DataSection) -> Result<GgufTensorInfo, GgufError> {
    let RawTensorInfo {
        name,
        dims,
        type_id,
        offset,
    } = raw;
    let Some(dtype) = DType::from_ggml_id(type_id) else {
        return Err(GgufError::UnknownTensorType {
            name,
            id: type_id,
            what: super::ggml_type::describe(type_id),
            supported: supported_types(),
        });
    };
    let size_bytes = match tensor_bytes(&dims, dtype) {
        Ok(size) => size,
        Err(TensorSizeError::Overflow) => return Err(GgufError::DimsOverflow { name, dims }),
        Err(TensorSizeError::NotBlockMultiple(ne0)) => {
            let block_size = dtype.block_size();
            return Err(GgufError::NotBlockMultiple {
                name,
                ne0,
                dtype,
                block_size,
            });
        }
    };
    if offset % data.alignment as u64 != 0 {
        return Err(GgufError::MisalignedOffset {
            name,
            offset,
            alignment: data.alignment,
        });
    }
    let available = data.file_size.saturating_sub(data.start) as u64;
    let in_bounds = data.start <= data.file_size
        && offset
            .checked_add(size_bytes)
            .is_some_and(|end| end <= available);
    if !in_bounds {
        return Err(GgufError::TensorOutOfBounds {
            name,
            start: offset,
            size: size_bytes,
            data_start: data.start,
            file_size: data.file_size,
        });
    }
    Ok(GgufTensorInfo {
        name,
        dims,
        dtype,
        offset,
        size_bytes,
    })
}

enum TensorSizeError {
    Overflow,
    NotBlockMultiple(u64),
}

/// Bytes of a tensor with ggml dims `dims`: `rows * dtype.row_bytes(ne0)` (row headers
/// included), checking every multiplication.
fn tensor_bytes(dims: &[u64], dtype: DType) -> Result<u64, TensorSizeError> {
    let mut n_elements: u64 = 1;
    for &d in dims {
        if usize::try_from(d).is_err() || d > i64::MAX as u64 {
            return Err(TensorSizeError::Overflow);
        }
        n_elements = n_elements.checked_mul(d).ok_or(TensorSizeError::Overflow)?;
    }
    if n_elements > i64::MAX as u64 {
        return Err(TensorSizeError::Overflow);
    }
    let ne0 = dims.first().copied().unwrap_or(1);
    let block = dtype.block_size() as u64;
    if ne0 % block != 0 {
        return Err(TensorSizeError::NotBlockMultiple(ne0));
    }
    let rows = dims
        .iter()
        .skip(1)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or(TensorSizeError::Overflow)?;
    let row_bytes = (ne0 / block)
        .checked_mul(dtype.block_bytes() as u64)
        .and_then(|b| b.checked_add(dtype.row_header_bytes() as u64))
        .ok_or(TensorSizeError::Overflow)?;
    rows.checked_mul(row_bytes).ok_or(TensorSizeError::Overflow)
}

/// Reject tensors whose byte ranges intersect (empty tensors never overlap anything).
fn check_overlaps(infos: &[GgufTensorInfo]) -> Result<(), GgufError> {
    let mut order: Vec<&GgufTensorInfo> = infos.iter().filter(|t| t.size_bytes > 0).collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // In bounds was checked, so `offset + size_bytes` does not overflow.
        let a_end = a.offset + a.size_bytes;
        if a_end > b.offset {
            return Err(GgufError::OverlappingTensors {
                first: a.name.clone(),
                second: b.name.clone(),
                first_end: a_end,
                second_start: b.offset,
            });
        }
    }
    Ok(())
}
