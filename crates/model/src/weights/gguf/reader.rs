//! A bounds-checked little-endian cursor over a GGUF file, and metadata value decoding.
//!
//! Every read checks the remaining length first; every count read from the file is checked
//! against what the remaining bytes could possibly hold *before* anything is allocated for it,
//! so a corrupt file yields a [`GgufError`] rather than a panic or a huge allocation.

use super::error::GgufError;
use super::meta::{MetaArray, MetaType, MetaValue};

/// Arrays of arrays deeper than this are rejected (bounds recursion on hostile input).
pub(super) const MAX_ARRAY_DEPTH: usize = 8;

/// A cursor over the file bytes. `ctx` names the item being read (e.g. `metadata key
/// "general.name"`) so errors say where they happened.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    ctx: String,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            ctx: "header".to_string(),
        }
    }

    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Set the description of the item being read, used in error messages.
    pub(super) fn set_context(&mut self, ctx: String) {
        self.ctx = ctx;
    }

    fn what(&self, field: &str) -> String {
        format!("{} {}", self.ctx, field)
    }

    pub(super) fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos,
                needed: n,
                what: self.what(field),
                file_size: self.buf.len(),
            });
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array_of<const N: usize>(&mut self, field: &str) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(super) fn u32(&mut self, field: &str) -> Result<u32, GgufError> {
        self.array_of(field).map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self, field: &str) -> Result<u64, GgufError> {
        self.array_of(field).map(u64::from_le_bytes)
    }

    /// Read a `u64` count of items that each take at least `min_size` bytes, and check that the
    /// rest of the file could hold that many.
    pub(super) fn count(&mut self, field: &str, min_size: usize) -> Result<usize, GgufError> {
        let offset = self.pos;
        let count = self.u64(field)?;
        let remaining = self.remaining();
        let max = (remaining / min_size.max(1)) as u64;
        if count > max {
            return Err(GgufError::AbsurdCount {
                what: self.what(field),
                count,
                max,
                offset,
                remaining,
            });
        }
        // `count <= remaining`, which is a `usize`, so the conversion is lossless.
        Ok(count as usize)
    }

    /// A GGUF string: `u64` byte length, then UTF-8 bytes.
    pub(super) fn string(&mut self, field: &str) -> Result<String, GgufError> {
        let len = self.count(&format!("{field} length"), 1)?;
        let offset = self.pos;
        let bytes = self.take(len, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: self.what(field),
                offset,
            }),
        }
    }

    /// A `u32` value type id.
    pub(super) fn meta_type(&mut self, field: &str) -> Result<MetaType, GgufError> {
        let offset = self.pos;
        let id = self.u32(field)?;
        MetaType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
            what: self.what(field),
            id,
            offset,
        })
    }

    fn bool_byte(&mut self, byte: u8, offset: usize) -> Result<bool, GgufError> {
        match byte {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(GgufError::InvalidBool {
                what: self.what("value"),
                byte,
                offset,
            }),
        }
    }

    /// A metadata value of type `ty`.
    pub(super) fn value(&mut self, ty: MetaType) -> Result<MetaValue, GgufError> {
        let f = "value";
        Ok(match ty {
            MetaType::U8 => MetaValue::U8(u8::from_le_bytes(self.array_of(f)?)),
            MetaType::I8 => MetaValue::I8(i8::from_le_bytes(self.array_of(f)?)),
            MetaType::U16 => MetaValue::U16(u16::from_le_bytes(self.array_of(f)?)),
            MetaType::I16 => MetaValue::I16(i16::from_le_bytes(self.array_of(f)?)),
            MetaType::U32 => MetaValue::U32(u32::from_le_bytes(self.array_of(f)?)),
            MetaType::I32 => MetaValue::I32(i32::from_le_bytes(self.array_of(f)?)),
            MetaType::F32 => MetaValue::F32(f32::from_le_bytes(self.array_of(f)?)),
            MetaType::U64 => MetaValue::U64(u64::from_le_bytes(self.array_of(f)?)),
            MetaType::I64 => MetaValue::I64(i64::from_le_bytes(self.array_of(f)?)),
            MetaType::F64 => MetaValue::F64(f64::from_le_bytes(self.array_of(f)?)),
            MetaType::Bool => {
                let offset = self.pos;
                let [byte] = self.array_of(f)?;
                MetaValue::Bool(self.bool_byte(byte, offset)?)
            }
            MetaType::String => MetaValue::String(self.string(f)?),
            MetaType::Array => MetaValue::Array(self.array(0)?),
        })
    }

    /// An array: `u32` element type, `u64` count, elements. `depth` counts enclosing arrays.
    fn array(&mut self, depth: usize) -> Result<MetaArray, GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                what: self.what("value"),
                max_depth: MAX_ARRAY_DEPTH,
                offset: self.pos,
            });
        }
        let ty = self.meta_type("array element type")?;
        let n = self.count("array length", ty.min_encoded_size())?;
        self.array_elements(ty, n, depth)
    }

    fn array_elements(
        &mut self,
        ty: MetaType,
        n: usize,
        depth: usize,
    ) -> Result<MetaArray, GgufError> {
        Ok(match ty {
            MetaType::U8 => MetaArray::U8(self.scalars(n, u8::from_le_bytes)?),
            MetaType::I8 => MetaArray::I8(self.scalars(n, i8::from_le_bytes)?),
            MetaType::U16 => MetaArray::U16(self.scalars(n, u16::from_le_bytes)?),
            MetaType::I16 => MetaArray::I16(self.scalars(n, i16::from_le_bytes)?),
            MetaType::U32 => MetaArray::U32(self.scalars(n, u32::from_le_bytes)?),
            MetaType::I32 => MetaArray::I32(self.scalars(n, i32::from_le_bytes)?),
            MetaType::F32 => MetaArray::F32(self.scalars(n, f32::from_le_bytes)?),
            MetaType::U64 => MetaArray::U64(self.scalars(n, u64::from_le_bytes)?),
            MetaType::I64 => MetaArray::I64(self.scalars(n, i64::from_le_bytes)?),
            MetaType::F64 => MetaArray::F64(self.scalars(n, f64::from_le_bytes)?),
            MetaType::Bool => {
                let offset = self.pos;
                let bytes = self.take(n, "array elements")?;
                let mut out = Vec::with_capacity(n);
                for (i, &b) in bytes.iter().enumerate() {
                    out.push(self.bool_byte(b, offset + i)?);
                }
                MetaArray::Bool(out)
            }
            MetaType::String => {
                let mut out = Vec::with_capacity(prealloc(n));
                for _ in 0..n {
                    out.push(self.string("array element")?);
                }
                MetaArray::String(out)
            }
            MetaType::Array => {
                let mut out = Vec::with_capacity(prealloc(n));
                for _ in 0..n {
                    out.push(self.array(depth + 1)?);
                }
                MetaArray::Array(out)
            }
        })
    }

    /// `n` fixed-size little-endian scalars; `n` was already checked against the file size.
    fn scalars<T, const N: usize>(
        &mut self,
        n: usize,
        decode: fn([u8; N]) -> T,
    ) -> Result<Vec<T>, GgufError> {
        let total = n.saturating_mul(N);
        let bytes = self.take(total, "array elements")?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                decode(a)
            })
            .collect())
    }
}

/// Most elements reserved ahead for an array of strings or arrays: their count is checked
/// against the bytes left only at its smallest encoding, so a crafted count in a large file
/// could otherwise reserve far more memory than the file holds; past this the vector grows as
/// elements are actually read.
pub(super) const MAX_PREALLOC: usize = 1024;

/// The capacity to reserve for `n` elements that are still to be read.
pub(super) fn prealloc(n: usize) -> usize {
    n.min(MAX_PREALLOC)
}
