//! Parsing the GGUF header: magic, version, counts, metadata key/value pairs and the raw
//! tensor info records (validated separately in [`super::tensor_info`]).
//!
//! ```text
//! "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//! n_kv  x { string key | u32 value type | value }
//! n_tensors x { string name | u32 n_dims | u64 ne[n_dims] (ne0 innermost) | u32 type | u64 offset }
//! padding to general.alignment | tensor data (offsets are relative to here)
//! ```
//! A string is a `u64` byte length followed by UTF-8 bytes; an array is a `u32` element type,
//! a `u64` count and the elements.

use std::collections::HashSet;

use super::error::GgufError;
use super::meta::MetaValue;
use super::reader::Reader;

/// The four magic bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";

/// Fewest bytes of one key/value pair: key length, value type, a one-byte value.
const MIN_KV_SIZE: usize = 8 + 4 + 1;
/// Fewest bytes of one tensor info: name length, n_dims, type, offset.
const MIN_TENSOR_INFO_SIZE: usize = 8 + 4 + 4 + 8;
/// ggml tensors have at most this many dimensions.
pub(super) const MAX_DIMS: u32 = 4;

/// A tensor info record as stored, before validation.
pub(super) struct RawTensorInfo {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub offset: u64,
}

/// Everything before the data section.
pub(super) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<RawTensorInfo>,
    /// Offset just past the last tensor info (the data section starts at the next aligned offset).
    pub end: usize,
}

/// Parse the header, metadata and tensor infos of the GGUF file in `buf`.
pub(super) fn parse_header(buf: &[u8]) -> Result<Header, GgufError> {
    let mut r = Reader::new(buf);
    let magic = r.take(4, "magic")?;
    if magic != GGUF_MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(GgufError::BadMagic { found });
    }
    let version = r.u32("version")?;
    if version != 2 && version != 3 {
        let hint = if matches!(version.swap_bytes(), 2 | 3) {
            " (the version looks byte-swapped: a big-endian file?)"
        } else {
            ""
        };
        return Err(GgufError::UnsupportedVersion { version, hint });
    }
    let n_tensors = r.u64("tensor count")?;
    let n_kv = r.count("metadata key/value count", MIN_KV_SIZE)?;
    let metadata = read_metadata(&mut r, n_kv)?;
    let tensors = read_tensor_infos(&mut r, n_tensors)?;
    Ok(Header {
        version,
        metadata,
        tensors,
        end: r.pos(),
    })
}

fn read_metadata(r: &mut Reader<'_>, n_kv: usize) -> Result<Vec<(String, MetaValue)>, GgufError> {
    let mut out = Vec::with_capacity(super::reader::prealloc(n_kv));
    let mut seen = HashSet::with_capacity(super::reader::prealloc(n_kv));
    for i in 0..n_kv {
        r.set_context(format!("metadata entry {i}"));
        let key = r.string("key")?;
        r.set_context(format!("metadata key {key:?}"));
        let ty = r.meta_type("value type")?;
        let value = r.value(ty)?;
        if !seen.insert(key.clone()) {
            return Err(GgufError::DuplicateKey { key });
        }
        out.push((key, value));
    }
    Ok(out)
}

fn read_tensor_infos(r: &mut Reader<'_>, n_tensors: u64) -> Result<Vec<RawTensorInfo>, GgufError> {
    let remaining = r.remaining();
    let max = (remaining / MIN_TENSOR_INFO_SIZE) as u64;
    if n_tensors > max {
        return Err(GgufError::AbsurdCount {
            what: "tensor count".to_string(),
            count: n_tensors,
            max,
            offset: 8,
            remaining,
        });
    }
    // `n_tensors <= max <= remaining`, a `usize`.
    let n = n_tensors as usize;
    let mut out = Vec::with_capacity(super::reader::prealloc(n));
    for i in 0..n {
        r.set_context(format!("tensor info {i}"));
        let name = r.string("name")?;
        r.set_context(format!("tensor info {i} ({name:?})"));
        let n_dims = r.u32("n_dims")?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooManyDims { name, n_dims });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(r.u64("dimension")?);
        }
        let type_id = r.u32("type")?;
        let offset = r.u64("offset")?;
        out.push(RawTensorInfo {
            name,
            dims,
            type_id,
            offset,
        });
    }
    Ok(out)
}
