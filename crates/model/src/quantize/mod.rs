//! Post-training quantization to the GGUF block types.
//!
//! * [`QuantMethod`]: the target (`q8_0`, `q4_0`, `q4_1`, `q4_k`, `q6_k`) and the per-tensor
//!   type rule [`QuantMethod::tensor_type`]: 1-D tensors (norms, biases) stay F32; the token
//!   embedding and the output head get Q8_0 for `q8_0` and Q6_K for the others; every other
//!   matrix gets the method's type. A row length that is not a whole number of blocks falls
//!   back as llama.cpp does (Q4_K → Q5_0, Q6_K → Q8_0, then F16).
//! * [`encode`]: `f32` values to the bytes of any supported [`DType`] (reference quantizers,
//!   rows spread over threads).
//! * [`quantize_model`]: a [`ModelSource`](crate::convert::ModelSource) (GGUF or HF directory)
//!   to a [`GgufWriter`](crate::weights::gguf::GgufWriter) holding the quantized model.

use kestrel_kernels::DType;

mod encode;
mod gguf_quantize;
pub mod group;

pub use encode::{encode, encode_threads};
pub use gguf_quantize::{quantize_model, TensorPlan};
pub use group::GroupQuant;

/// Why quantization failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Convert(#[from] crate::convert::ConvertError),
    #[error(transparent)]
    Write(#[from] crate::weights::gguf::GgufWriteError),
    #[error("unknown quantization method {0:?} (expected q8_0, q4_0, q4_1, q4_k or q6_k)")]
    UnknownMethod(String),
}

/// A quantization target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum QuantMethod {
    Q8_0,
    Q4_0,
    Q4_1,
    Q4_K,
    Q6_K,
}

impl std::str::FromStr for QuantMethod {
    type Err = QuantizeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "q8_0" => Ok(QuantMethod::Q8_0),
            "q4_0" => Ok(QuantMethod::Q4_0),
            "q4_1" => Ok(QuantMethod::Q4_1),
            "q4_k" | "q4_k_s" => Ok(QuantMethod::Q4_K),
            "q6_k" => Ok(QuantMethod::Q6_K),
            _ => Err(QuantizeError::UnknownMethod(s.to_string())),
        }
    }
}

impl QuantMethod {
    /// The block type of ordinary weight matrices.
    pub fn dtype(self) -> DType {
        match self {
            QuantMethod::Q8_0 => DType::Q8_0,
            QuantMethod::Q4_0 => DType::Q4_0,
            QuantMethod::Q4_1 => DType::Q4_1,
            QuantMethod::Q4_K => DType::Q4_K,
            QuantMethod::Q6_K => DType::Q6_K,
        }
    }

    /// llama.cpp's `general.file_type` (`LLAMA_FTYPE_MOSTLY_*`) for this method.
    pub fn file_type(self) -> u32 {
        match self {
            QuantMethod::Q4_0 => 2,
            QuantMethod::Q4_1 => 3,
            QuantMethod::Q8_0 => 7,
            QuantMethod::Q4_K => 14,
            QuantMethod::Q6_K => 18,
        }
    }

    /// The type tensor `name` of row-major `shape` gets.
    pub fn tensor_type(self, name: &str, shape: &[usize]) -> DType {
        if shape.len() < 2 {
            return DType::F32;
        }
        let is_head = name == "token_embd.weight" || name == "output.weight";
        let wanted = match (is_head, self) {
            (true, QuantMethod::Q8_0) => DType::Q8_0,
            (true, _) => DType::Q6_K,
            (false, m) => m.dtype(),
        };
        fitting_type(wanted, shape[shape.len() - 1])
    }
}

/// `wanted`, or the first fallback whose block size divides `row_len`.
pub fn fitting_type(wanted: DType, row_len: usize) -> DType {
    let mut t = wanted;
    loop {
        if row_len % t.block_size() == 0 {
            return t;
        }
        t = match t {
            DType::Q4_K => DType::Q5_0,
            DType::Q5_K | DType::Q6_K => DType::Q8_0,
            _ => DType::F16,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_rules() {
        let m = QuantMethod::Q4_K;
        assert_eq!(m.tensor_type("blk.0.attn_norm.weight", &[576]), DType::F32);
        assert_eq!(
            m.tensor_type("blk.0.ffn_down.weight", &[576, 1536]),
            DType::Q4_K
        );
        assert_eq!(
            m.tensor_type("blk.0.ffn_up.weight", &[1536, 576]),
            DType::Q5_0
        );
        assert_eq!(
            m.tensor_type("token_embd.weight", &[49152, 576]),
            DType::Q8_0
        );
        assert_eq!(
            m.tensor_type("token_embd.weight", &[49152, 512]),
            DType::Q6_K
        );
        assert_eq!(
            QuantMethod::Q8_0.tensor_type("output.weight", &[10, 64]),
            DType::Q8_0
        );
        assert_eq!(
            QuantMethod::Q4_0.tensor_type("blk.0.attn_q.weight", &[64, 64]),
            DType::Q4_0
        );
        assert_eq!(
            QuantMethod::Q4_0.tensor_type("blk.0.attn_q.weight", &[64, 48]),
            DType::F16
        );
        assert_eq!("Q4_K".parse::<QuantMethod>().unwrap(), QuantMethod::Q4_K);
        assert!("q3_k".parse::<QuantMethod>().is_err());
    }
}
