//! [`ConvertError`]: why a conversion between GGUF and HF checkpoints failed.

use kestrel_model::config::ConfigError;
use kestrel_model::weights::gguf::{GgufError, GgufWriteError};
use kestrel_model::ModelError;

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Write(#[from] GgufWriteError),
    #[error("writing safetensors: {0}")]
    Safetensors(#[from] safetensors::SafeTensorError),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("unsupported for conversion: {0}")]
    Unsupported(String),
}

impl ConvertError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> ConvertError {
        ConvertError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
