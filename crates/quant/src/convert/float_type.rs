//! [`FloatType`]: the floating-point storage types converted tensors may take.

use kestrel_kernels::DType;

use super::ConvertError;

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
