//! [`GgufWriter`]: builds a GGUF version 3 file from metadata and tensors.
//!
//! Tensors are laid out in the order they were added, each at the next multiple of the
//! alignment (`general.alignment` if set, else 32), with zero padding in between.

use std::collections::HashSet;
use std::io::Write;

use kestrel_kernels::DType;

use super::meta::{MetaArray, MetaValue};
use super::parse::{GGUF_MAGIC, MAX_DIMS};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT};

/// Why a [`GgufWriter`] refused an item or could not write.
#[derive(Debug, thiserror::Error)]
pub enum GgufWriteError {
    #[error("metadata key {0:?} added twice")]
    DuplicateKey(String),
    #[error("tensor {0:?} added twice")]
    DuplicateTensor(String),
    #[error("general.alignment must be a u32 power of two, got {0:?}")]
    BadAlignment(MetaValue),
    #[error("tensor {name:?}: {n_dims} dimensions, at most 4 allowed")]
    TooManyDims { name: String, n_dims: usize },
    #[error("tensor {name:?}: shape {shape:?} needs {expected:?} bytes of {dtype}, got {got}")]
    SizeMismatch {
        name: String,
        shape: Vec<usize>,
        dtype: DType,
        expected: Option<usize>,
        got: usize,
    },
    #[error("writing GGUF: {0}")]
    Io(#[from] std::io::Error),
}

struct PendingTensor {
    name: String,
    /// ggml order (innermost first).
    dims: Vec<u64>,
    dtype: DType,
    data: Vec<u8>,
}

/// Accumulates metadata and tensors, then writes a GGUF v3 file.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
    alignment: Option<usize>,
}

impl GgufWriter {
    /// An empty writer (alignment 32 unless `general.alignment` is added).
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Add a metadata entry. `general.alignment` must be a `u32` power of two; it sets the
    /// alignment of the data section.
    pub fn add_metadata(&mut self, key: &str, value: MetaValue) -> Result<(), GgufWriteError> {
        if key == ALIGNMENT_KEY {
            match value {
                MetaValue::U32(a) if a.is_power_of_two() => self.alignment = Some(a as usize),
                other => return Err(GgufWriteError::BadAlignment(other)),
            }
        }
        if !self.keys.insert(key.to_string()) {
            return Err(GgufWriteError::DuplicateKey(key.to_string()));
        }
        self.metadata.push((key.to_string(), value));
        Ok(())
    }

    /// Add a tensor with row-major `shape` (outermost first) and its raw `data`, which must be
    /// exactly the bytes `dtype` needs for that shape.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        data: Vec<u8>,
    ) -> Result<(), GgufWriteError> {
        if shape.len() > MAX_DIMS as usize {
            return Err(GgufWriteError::TooManyDims {
                name: name.to_string(),
                n_dims: shape.len(),
            });
        }
        let expected = expected_bytes(dtype, shape);
        if expected != Some(data.len()) {
            return Err(GgufWriteError::SizeMismatch {
                name: name.to_string(),
                shape: shape.to_vec(),
                dtype,
                expected,
                got: data.len(),
            });
        }
        if !self.names.insert(name.to_string()) {
            return Err(GgufWriteError::DuplicateTensor(name.to_string()));
        }
        let dims = shape.iter().rev().map(|&d| d as u64).collect();
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dims,
            dtype,
            data,
        });
        Ok(())
    }

    /// Write the whole file to `out`.
    pub fn write(&self, out: &mut impl Write) -> Result<(), GgufWriteError> {
        let alignment = self.alignment.unwrap_or(DEFAULT_ALIGNMENT);
        let mut w = CountingWriter { out, written: 0 };
        w.put(&GGUF_MAGIC)?;
        w.put(&3u32.to_le_bytes())?;
        w.put(&(self.tensors.len() as u64).to_le_bytes())?;
        w.put(&(self.metadata.len() as u64).to_le_bytes())?;
        for (key, value) in &self.metadata {
            w.string(key)?;
            w.put(&(value.meta_type() as u32).to_le_bytes())?;
            w.value(value)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            w.string(&t.name)?;
            w.put(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                w.put(&d.to_le_bytes())?;
            }
            w.put(&(t.dtype as u32).to_le_bytes())?;
            w.put(&offset.to_le_bytes())?;
            offset = (offset + t.data.len() as u64).next_multiple_of(alignment as u64);
        }
        for t in &self.tensors {
            w.pad_to(alignment)?;
            w.put(&t.data)?;
        }
        Ok(())
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufWriteError> {
        let mut out = Vec::new();
        self.write(&mut out)?;
        Ok(out)
    }
}

/// Bytes for a tensor of row-major `shape`, if the innermost dimension is whole blocks.
fn expected_bytes(dtype: DType, shape: &[usize]) -> Option<usize> {
    let inner = shape.last().copied().unwrap_or(1);
    let outer = shape[..shape.len().saturating_sub(1)]
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
    dtype.row_bytes(inner)?.checked_mul(outer)
}

struct CountingWriter<'a, W: Write> {
    out: &'a mut W,
    written: usize,
}

impl<W: Write> CountingWriter<'_, W> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len();
        Ok(())
    }

    fn pad_to(&mut self, alignment: usize) -> std::io::Result<()> {
        let pad = self.written.next_multiple_of(alignment) - self.written;
        self.put(&vec![0u8; pad])
    }

    fn string(&mut self, s: &str) -> std::io::Result<()> {
        self.put(&(s.len() as u64).to_le_bytes())?;
        self.put(s.as_bytes())
    }

    fn value(&mut self, value: &MetaValue) -> std::io::Result<()> {
        match value {
            MetaValue::U8(v) => self.put(&v.to_le_bytes()),
            MetaValue::I8(v) => self.put(&v.to_le_bytes()),
            MetaValue::U16(v) => self.put(&v.to_le_bytes()),
            MetaValue::I16(v) => self.put(&v.to_le_bytes()),
            MetaValue::U32(v) => self.put(&v.to_le_bytes()),
            MetaValue::I32(v) => self.put(&v.to_le_bytes()),
            MetaValue::F32(v) => self.put(&v.to_le_bytes()),
            MetaValue::Bool(v) => self.put(&[u8::from(*v)]),
            MetaValue::String(s) => self.string(s),
            MetaValue::Array(a) => self.array(a),
            MetaValue::U64(v) => self.put(&v.to_le_bytes()),
            MetaValue::I64(v) => self.put(&v.to_le_bytes()),
            MetaValue::F64(v) => self.put(&v.to_le_bytes()),
        }
    }

    fn array(&mut self, a: &MetaArray) -> std::io::Result<()> {
        self.put(&(a.element_type() as u32).to_le_bytes())?;
        self.put(&(a.len() as u64).to_le_bytes())?;
        match a {
            MetaArray::U8(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::I8(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::U16(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::I16(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::U32(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::I32(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::F32(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::Bool(v) => v.iter().try_for_each(|x| self.put(&[u8::from(*x)])),
            MetaArray::String(v) => v.iter().try_for_each(|s| self.string(s)),
            MetaArray::Array(v) => v.iter().try_for_each(|inner| self.array(inner)),
            MetaArray::U64(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::I64(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
            MetaArray::F64(v) => v.iter().try_for_each(|x| self.put(&x.to_le_bytes())),
        }
    }
}
