//! Converting between GGUF files and Hugging Face checkpoint directories (Llama family).
//!
//! * [`ModelSource`]: a GGUF file or an HF directory seen as GGUF-named tensors plus GGUF
//!   metadata; HF Q/K rows are permuted into GGUF order on the way ([`permute`]).
//! * [`gguf_to_hf`]: GGUF (any supported type, dequantized) → `config.json`,
//!   `model.safetensors` (HF names, Q/K rows un-permuted), `tokenizer.json`,
//!   `tokenizer_config.json` and `generation_config.json`.
//! * [`hf_to_gguf`]: HF directory → GGUF with llama metadata, tokenizer metadata and
//!   F32/F16/BF16 tensors (1-D tensors always F32).

use kestrel_kernels::DType;

mod hf_config;
mod names;
pub mod permute;
mod source;
mod to_gguf;
mod to_hf;
mod tokenizer_meta;

pub use names::NameMap;
pub use source::{ModelSource, SourceTensor};
pub use to_gguf::{hf_to_gguf, retype, retype_with, write_file};
pub use to_hf::gguf_to_hf;

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error(transparent)]
    Model(#[from] crate::error::ModelError),
    #[error(transparent)]
    Gguf(#[from] crate::weights::gguf::GgufError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Write(#[from] crate::weights::gguf::GgufWriteError),
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

/// A floating-point storage type for converted tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatType {
    F32,
    F16,
    BF16,
}

impl std::str::FromStr for FloatType {
    type Err = ConvertError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(FloatType::F32),
            "f16" | "float16" => Ok(FloatType::F16),
            "bf16" | "bfloat16" => Ok(FloatType::BF16),
            _ => Err(ConvertError::Unsupported(format!(
                "dtype {s:?} (expected f32, f16 or bf16)"
            ))),
        }
    }
}

impl FloatType {
    pub fn dtype(self) -> DType {
        match self {
            FloatType::F32 => DType::F32,
            FloatType::F16 => DType::F16,
            FloatType::BF16 => DType::BF16,
        }
    }

    /// The name transformers uses (`torch_dtype`).
    pub fn torch_name(self) -> &'static str {
        match self {
            FloatType::F32 => "float32",
            FloatType::F16 => "float16",
            FloatType::BF16 => "bfloat16",
        }
    }

    /// llama.cpp's `general.file_type` for an all-float file of this type.
    pub fn gguf_file_type(self) -> u32 {
        match self {
            FloatType::F32 => 0,
            FloatType::F16 => 1,
            FloatType::BF16 => 32,
        }
    }

    pub(crate) fn safetensors_dtype(self) -> safetensors::Dtype {
        match self {
            FloatType::F32 => safetensors::Dtype::F32,
            FloatType::F16 => safetensors::Dtype::F16,
            FloatType::BF16 => safetensors::Dtype::BF16,
        }
    }
}
