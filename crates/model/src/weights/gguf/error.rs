//! [`GgufError`]: everything that can be wrong with a GGUF file, each variant naming the
//! problem and where it was found.

use std::path::PathBuf;

/// Why a GGUF file could not be read, or a metadata lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read GGUF file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {version} (Kestrel reads versions 2 and 3){hint}")]
    UnsupportedVersion { version: u32, hint: &'static str },
    #[error("GGUF file truncated: needed {needed} bytes for {what} at offset {offset}, file is {file_size} bytes")]
    Truncated {
        offset: usize,
        needed: usize,
        what: String,
        file_size: usize,
    },
    #[error("GGUF {what} is {count} at offset {offset}, but the remaining {remaining} bytes can hold at most {max}")]
    AbsurdCount {
        what: String,
        count: u64,
        max: u64,
        offset: usize,
        remaining: usize,
    },
    #[error("GGUF {what}: arrays nested deeper than {max_depth} levels at offset {offset}")]
    NestingTooDeep {
        what: String,
        max_depth: usize,
        offset: usize,
    },
    #[error("GGUF {what}: unknown metadata value type id {id} at offset {offset}")]
    UnknownValueType {
        what: String,
        id: u32,
        offset: usize,
    },
    #[error("GGUF {what}: invalid bool byte {byte} at offset {offset}")]
    InvalidBool {
        what: String,
        byte: u8,
        offset: usize,
    },
    #[error("GGUF {what}: invalid UTF-8 in string at offset {offset}")]
    InvalidUtf8 { what: String, offset: usize },
    #[error("GGUF metadata key {key:?} appears twice")]
    DuplicateKey { key: String },
    #[error("GGUF general.alignment must be a non-zero power of two, got {value}")]
    BadAlignment { value: String },
    /// `what` names the type (`"IQ2_XXS (ggml type 16)"`, `"unknown type id 99"`).
    #[error("GGUF tensor {name:?}: tensor type {what} is not supported by Kestrel (supported: {supported})")]
    UnknownTensorType {
        name: String,
        id: u32,
        what: String,
        supported: String,
    },
    #[error("GGUF tensor {name:?}: {n_dims} dimensions, at most 4 allowed")]
    TooManyDims { name: String, n_dims: u32 },
    #[error("GGUF tensor {name:?}: dimensions {dims:?} overflow the element count")]
    DimsOverflow { name: String, dims: Vec<u64> },
    #[error("GGUF tensor {name:?}: innermost dimension {ne0} is not a multiple of the {dtype} block size {block_size}")]
    NotBlockMultiple {
        name: String,
        ne0: u64,
        dtype: kestrel_kernels::DType,
        block_size: usize,
    },
    #[error(
        "GGUF tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedOffset {
        name: String,
        offset: u64,
        alignment: usize,
    },
    #[error("GGUF tensor {name:?}: data [{start}, {start}+{size}) of the data section (which starts at {data_start}) runs past the end of the {file_size}-byte file")]
    TensorOutOfBounds {
        name: String,
        start: u64,
        size: u64,
        data_start: usize,
        file_size: usize,
    },
    #[error("GGUF tensors {first:?} and {second:?} overlap: {first:?} ends at {first_end}, {second:?} starts at {second_start}")]
    OverlappingTensors {
        first: String,
        second: String,
        first_end: u64,
        second_start: u64,
    },
    #[error("GGUF tensor name {name:?} appears twice")]
    DuplicateTensor { name: String },
    #[error("GGUF metadata key {key:?} is missing")]
    MissingKey { key: String },
    #[error("GGUF metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
}
