//! Fetching and decoding the packed tensors of a quantized linear: dtype and shape checks,
//! int32 words, float scales, and `bits`-wide fields inside a word.
//!
//! ```text
//!  one int32 word, 4-bit fields (8-bit: 4 fields of 8 bits)
//!  bit 31                                   bit 0
//!  | f7 | f6 | f5 | f4 | f3 | f2 | f1 | f0 |      field(word, k, 4) = (word >> 4k) & 0xF
//! ```

use half::{bf16, f16};
use kestrel_model::weights::safetensors::{RawTensor, SafetensorsCheckpoint};

use super::ImportError;

/// The tensor `name`, checked to be I32 with shape `shape`, as little-endian words.
pub(crate) fn words(
    ckpt: &SafetensorsCheckpoint,
    name: &str,
    shape: &[usize],
) -> Result<Vec<u32>, ImportError> {
    let t = fetch(ckpt, name, shape)?;
    if t.dtype != "I32" {
        return Err(bad_dtype(t, "I32"));
    }
    Ok(t.data
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// The tensor `name`, checked to have shape `shape`, as little-endian i32 values.
pub(crate) fn ints(
    ckpt: &SafetensorsCheckpoint,
    name: &str,
    shape: &[usize],
) -> Result<Vec<i64>, ImportError> {
    Ok(words(ckpt, name, shape)?
        .into_iter()
        .map(|w| i64::from(w as i32))
        .collect())
}

/// The float tensor `name` (F16, BF16 or F32), checked to have shape `shape`, in f32.
pub(crate) fn floats(
    ckpt: &SafetensorsCheckpoint,
    name: &str,
    shape: &[usize],
) -> Result<Vec<f32>, ImportError> {
    let t = fetch(ckpt, name, shape)?;
    let two = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
    match t.dtype.as_str() {
        "F16" => Ok(t
            .data
            .chunks_exact(2)
            .map(|b| f16::from_bits(two(b)).to_f32())
            .collect()),
        "BF16" => Ok(t
            .data
            .chunks_exact(2)
            .map(|b| bf16::from_bits(two(b)).to_f32())
            .collect()),
        "F32" => Ok(t
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()),
        _ => Err(bad_dtype(t, "F16, BF16 or F32")),
    }
}

/// Field `k` (0 = least significant) of width `bits` in `word`.
pub(crate) fn field(word: u32, k: usize, bits: u8) -> u8 {
    // `bits` is 4 or 8, so the mask fits in a u8 and the cast keeps every set bit.
    ((word >> (k * bits as usize)) & ((1u32 << bits) - 1)) as u8
}

/// `n` as a multiple of `m`, or a [`ImportError::NotMultiple`] naming `what`.
pub(crate) fn multiple(
    prefix: &str,
    what: &'static str,
    n: usize,
    m: usize,
) -> Result<usize, ImportError> {
    if m == 0 || !n.is_multiple_of(m) {
        return Err(ImportError::NotMultiple {
            prefix: prefix.to_string(),
            what,
            n,
            multiple: m,
        });
    }
    Ok(n / m)
}

fn fetch(
    ckpt: &SafetensorsCheckpoint,
    name: &str,
    shape: &[usize],
) -> Result<RawTensor, ImportError> {
    let t = ckpt
        .raw_tensor(name)
        .ok_or_else(|| ImportError::MissingTensor(name.to_string()))?;
    if t.shape != shape {
        return Err(ImportError::BadShape {
            name: name.to_string(),
            shape: t.shape,
            expected: shape.to_vec(),
        });
    }
    Ok(t)
}

fn bad_dtype(t: RawTensor, expected: &'static str) -> ImportError {
    ImportError::BadDtype {
        name: t.name,
        dtype: t.dtype,
        expected,
    }
}

/// `v`, a row-major `[r][c]` matrix, as row-major `[c][r]`.
pub(crate) fn transpose<T: Copy>(v: &[T], r: usize, c: usize) -> Vec<T> {
    (0..c)
        .flat_map(|j| (0..r).map(move |i| v[i * c + j]))
        .collect()
}
