//! GGUF reader: [`GgufFile`] parses and validates a GGUF (version 2 or 3) file, memory-mapped
//! through [`SharedBytes`], and hands its tensors out as [`TensorView`]s without copying.
//!
//! Parsing is defensive: every read is bounds-checked, every count is checked against the
//! bytes left in the file before anything is allocated for it, and tensor infos are validated
//! (known type, whole blocks, aligned, in bounds, no overlaps, unique names) when the file is
//! opened, so later accessors cannot fail. Problems come back as a [`GgufError`] that names
//! what was wrong and where.
//!
//! [`GgufWriter`] produces GGUF version 3 files (used for quantized outputs and in tests).

use std::collections::HashMap;
use std::path::Path;

use kestrel_kernels::SharedBytes;

use super::{TensorSource, TensorView};

mod error;
mod ggml_type;
mod meta;
mod parse;
mod reader;
mod tensor_info;
mod writer;

pub use error::GgufError;
pub use meta::{MetaArray, MetaType, MetaValue};
pub use parse::GGUF_MAGIC;
pub use tensor_info::GgufTensorInfo;
pub use writer::{GgufWriteError, GgufWriter};

/// Alignment of the data section and tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// The metadata key that overrides [`DEFAULT_ALIGNMENT`].
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// A parsed, validated GGUF file.
pub struct GgufFile {
    bytes: SharedBytes,
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: usize,
    data_start: usize,
}

impl GgufFile {
    /// Memory-map and parse the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let bytes = SharedBytes::map_file(path).map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(bytes)
    }

    /// Parse a GGUF file held in `bytes`.
    pub fn from_bytes(bytes: SharedBytes) -> Result<GgufFile, GgufError> {
        let header = parse::parse_header(&bytes)?;
        let meta_index = header
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let alignment = read_alignment(&header.metadata)?;
        let data_start = header
            .end
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| GgufError::BadAlignment {
                value: alignment.to_string(),
            })?;
        let section = tensor_info::DataSection {
            start: data_start,
            file_size: bytes.len(),
            alignment,
        };
        let (tensors, tensor_index) = tensor_info::validate_tensors(header.tensors, &section)?;
        Ok(GgufFile {
            bytes,
            version: header.version,
            metadata: header.metadata,
            meta_index,
            tensors,
            tensor_index,
            alignment,
            data_start,
        })
    }

    /// The GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// All metadata key/value pairs, in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The info of the tensor called `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of one of this file's tensors; `None` if `info` does not describe a tensor of
    /// this file.
    pub fn tensor_data(&self, info: &GgufTensorInfo) -> Option<SharedBytes> {
        let own = self.tensor_info(&info.name).filter(|own| *own == info)?;
        // Validated at open: `data_start + offset + size_bytes <= file_size`.
        let start = self.data_start + own.offset as usize;
        self.bytes.slice(start..start + own.size_bytes as usize)
    }

    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> usize {
        self.bytes.len()
    }

    /// Alignment of the data section and of every tensor offset.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Absolute file offset where the tensor data section starts.
    pub fn data_start(&self) -> usize {
        self.data_start
    }
}

/// `general.alignment` if present (any integer type), else [`DEFAULT_ALIGNMENT`].
fn read_alignment(metadata: &[(String, MetaValue)]) -> Result<usize, GgufError> {
    let Some((_, value)) = metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match value.as_u32() {
        Some(a) if a.is_power_of_two() => Ok(a as usize),
        _ => Err(GgufError::BadAlignment {
            value: format!("{value:?}"),
        }),
    }
}

/// Typed metadata getters. Integer getters accept any integer type whose value fits, float
/// getters accept `f32` or `f64`; anything else is a [`GgufError::WrongType`], and an absent
/// key is a [`GgufError::MissingKey`] (see [`OptionalKey::optional`]).
impl GgufFile {
    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(&'a MetaValue) -> Option<T>,
    ) -> Result<T, GgufError> {
        let value = self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })?;
        convert(value).ok_or_else(|| GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: describe(value),
        })
    }

    /// Any integer value that fits in `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.typed(key, "an integer in u32 range", MetaValue::as_u32)
    }

    /// Any integer value that fits in `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.typed(key, "an integer in u64 range", MetaValue::as_u64)
    }

    /// Any integer value that fits in `i64`.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        self.typed(key, "an integer in i64 range", MetaValue::as_i64)
    }

    /// An `f32` (or narrowed `f64`) value.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.typed(key, "a float", MetaValue::as_f32)
    }

    /// An `f64` (or widened `f32`) value.
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        self.typed(key, "a float", MetaValue::as_f64)
    }

    /// A `bool` value.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        self.typed(key, "a bool", MetaValue::as_bool)
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        self.typed(key, "a string", MetaValue::as_str)
    }

    /// An array of any element type.
    pub fn get_array(&self, key: &str) -> Result<&MetaArray, GgufError> {
        self.typed(key, "an array", MetaValue::as_array)
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<&[String], GgufError> {
        self.typed(key, "an array of string", |v| match v.as_array()? {
            MetaArray::String(a) => Some(a.as_slice()),
            _ => None,
        })
    }

    /// An array of `i32`.
    pub fn get_i32_array(&self, key: &str) -> Result<&[i32], GgufError> {
        self.typed(key, "an array of i32", |v| match v.as_array()? {
            MetaArray::I32(a) => Some(a.as_slice()),
            _ => None,
        })
    }

    /// An array of `u32`.
    pub fn get_u32_array(&self, key: &str) -> Result<&[u32], GgufError> {
        self.typed(key, "an array of u32", |v| match v.as_array()? {
            MetaArray::U32(a) => Some(a.as_slice()),
            _ => None,
        })
    }

    /// An array of `f32`.
    pub fn get_f32_array(&self, key: &str) -> Result<&[f32], GgufError> {
        self.typed(key, "an array of f32", |v| match v.as_array()? {
            MetaArray::F32(a) => Some(a.as_slice()),
            _ => None,
        })
    }
}

/// A value's type and, for short values, the value itself, for error messages.
fn describe(value: &MetaValue) -> String {
    match value {
        MetaValue::Array(a) => format!("{} ({} elements)", value.type_description(), a.len()),
        MetaValue::String(s) if s.len() > 40 => format!("a string of {} bytes", s.len()),
        other => format!("{} ({other:?})", other.type_description()),
    }
}

/// Turns "key missing" into `Ok(None)` for optional metadata.
pub trait OptionalKey<T> {
    /// `Ok(Some(v))` for a present, well-typed key; `Ok(None)` for an absent one; other
    /// errors (wrong type) pass through.
    fn optional(self) -> Result<Option<T>, GgufError>;
}

impl<T> OptionalKey<T> for Result<T, GgufError> {
    fn optional(self) -> Result<Option<T>, GgufError> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(GgufError::MissingKey { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl TensorSource for GgufFile {
    fn tensor(&self, name: &str) -> Option<TensorView> {
        let info = self.tensor_info(name)?;
        Some(TensorView {
            name: info.name.clone(),
            dtype: info.dtype,
            shape: info.shape(),
            data: self.tensor_data(info)?,
        })
    }

    fn tensor_names(&self) -> Vec<String> {
        self.tensors.iter().map(|t| t.name.clone()).collect()
    }

    /// From the metadata array `kestrel.input_perm.<name>`; a value of another type yields an
    /// empty permutation, which the layer rejects with a clear error.
    fn input_perm(&self, name: &str) -> Option<Vec<u32>> {
        let value = self.get(&format!("{INPUT_PERM_KEY_PREFIX}{name}"))?;
        Some(match value.as_array() {
            Some(MetaArray::U32(v)) => v.clone(),
            _ => Vec::new(),
        })
    }

    /// From the metadata array `kestrel.outlier_cols.<name>`; a value of another type yields
    /// an empty list, which the layer rejects with a clear error.
    fn outlier_columns(&self, name: &str) -> Option<Vec<u32>> {
        let value = self.get(&format!("{OUTLIER_COLS_KEY_PREFIX}{name}"))?;
        Some(match value.as_array() {
            Some(MetaArray::U32(v)) => v.clone(),
            _ => Vec::new(),
        })
    }
}

/// Metadata key prefix of a tensor's input-column permutation (`u32` array).
pub const INPUT_PERM_KEY_PREFIX: &str = "kestrel.input_perm.";

/// Metadata key prefix of a tensor's outlier input channels (`u32` array).
pub const OUTLIER_COLS_KEY_PREFIX: &str = "kestrel.outlier_cols.";

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_start", &self.data_start)
            .field("file_size", &self.bytes.len())
            .finish()
    }
}
