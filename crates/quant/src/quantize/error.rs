//! [`QuantizeError`]: why quantization failed.

use kestrel_model::weights::gguf::GgufWriteError;

use super::linalg::LinalgError;
use crate::codec::PackError;
use crate::convert::ConvertError;

/// Why quantization failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error(transparent)]
    Write(#[from] GgufWriteError),
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error("unknown quantization method {0:?} (expected one of q8_0, q4_0, q4_1, q4_k, q6_k, int8, int4, awq, gptq, nf4)")]
    UnknownMethod(String),
    #[error(
        "kestrel quantize cannot produce {name}: Kestrel loads and runs it, but {reason}; \
         kestrel quantize produces q8_0, q4_0, q4_1, q4_k, q6_k, int8, int4, awq, gptq and nf4"
    )]
    UnsupportedTarget {
        /// The type asked for, as GGUF spells it.
        name: &'static str,
        /// Why Kestrel does not make it, and what does.
        reason: &'static str,
    },
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
        source: LinalgError,
    },
}
