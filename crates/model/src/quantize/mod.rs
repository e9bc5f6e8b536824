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

pub mod attn_weights;
pub mod awq;
pub mod calib;
mod encode;
mod gguf_quantize;
pub mod gptq;
pub mod group;
pub mod in_situ;
pub mod linalg;
mod method;
pub mod outliers;
mod pack;
pub mod rtn;
mod toolkit;

pub use encode::{encode, encode_rows, encode_threads};
pub use gguf_quantize::{quantize_model, TensorPlan};
pub use group::GroupQuant;
pub use method::{fitting_type, QuantMethod, QuantOptions, Smoothing};
pub use pack::pack;
pub use toolkit::{quantize_with, CalibText, Progress, METHOD_KEY};

/// Why quantization failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Convert(#[from] crate::convert::ConvertError),
    #[error(transparent)]
    Write(#[from] crate::weights::gguf::GgufWriteError),
    #[error("unknown quantization method {0:?} (expected one of q8_0, q4_0, q4_1, q4_k, q6_k, int8, int4, awq, gptq, nf4)")]
    UnknownMethod(String),
    #[error("invalid quantization option: {0}")]
    BadOption(String),
    #[error("{method} needs calibration text (--calib FILE)")]
    NeedsCalibration { method: &'static str },
    #[error("calibration: {0}")]
    Calibration(String),
    #[error("GPTQ on {tensor}: {source}")]
    Gptq {
        tensor: String,
        #[source]
        source: linalg::LinalgError,
    },
}
