//! [`ImportError`]: why an AWQ/GPTQ checkpoint's configuration or packed tensors cannot be read.

use std::path::PathBuf;

/// Everything that can go wrong reading a community AWQ/GPTQ checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {reason}")]
    Json { path: PathBuf, reason: String },
    #[error("quantization config in {path}: missing field {field:?}")]
    MissingField { path: PathBuf, field: &'static str },
    #[error("quantization config in {path}: field {field:?} {reason}")]
    BadField {
        path: PathBuf,
        field: &'static str,
        reason: String,
    },
    #[error("quantization method {0:?} is not supported (Kestrel imports \"awq\" and \"gptq\")")]
    UnsupportedMethod(String),
    #[error("{method} with {bits} bits is not supported (supported: {supported})")]
    UnsupportedBits {
        method: &'static str,
        bits: i64,
        supported: &'static str,
    },
    #[error("{method} checkpoint format {format:?} is not supported (supported: {supported})")]
    UnsupportedFormat {
        method: &'static str,
        format: String,
        supported: &'static str,
    },
    #[error("quantized tensor {0:?} is missing from the checkpoint")]
    MissingTensor(String),
    #[error("tensor {name:?} has dtype {dtype}, expected {expected}")]
    BadDtype {
        name: String,
        dtype: String,
        expected: &'static str,
    },
    #[error("tensor {name:?} has shape {shape:?}, expected {expected:?}")]
    BadShape {
        name: String,
        shape: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("{prefix}: {what} ({n}) is not a multiple of {multiple}")]
    NotMultiple {
        prefix: String,
        what: &'static str,
        n: usize,
        multiple: usize,
    },
    #[error("{name}: {reason}")]
    BadGIdx { name: String, reason: String },
    #[error("cannot repack into a Kestrel tensor type: {0}")]
    Repack(String),
    #[error("quantized linear {name}: {reason}")]
    Linear { name: String, reason: String },
}
