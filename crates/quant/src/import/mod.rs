//! Reading community AWQ (AutoAWQ, GEMM layout) and GPTQ (AutoGPTQ / GPTQModel, `gptq` and
//! `gptq_v2` layouts) checkpoints: HF directories whose `config.json` carries a
//! `quantization_config` and whose safetensors hold each quantized linear as packed int32
//! tensors `<prefix>.qweight`, `.qzeros`, `.scales` (and, for GPTQ, `.g_idx`).
//!
//! * [`quant_config`] reads and validates the [`QuantConfig`] of a directory.
//! * [`is_quantized_linear`] tells whether a linear is stored packed (tools leave some modules,
//!   such as `lm_head`, in floating point).
//! * [`read_linear`] unpacks one linear into a [`GroupQuant`]: one code per byte, f32 scales,
//!   integer zeros and, for GPTQ activation order, the column permutation.
//!
//! The packings are documented with diagrams in `awq.rs` and `gptq.rs`.

mod awq;
mod error;
mod gptq;
mod linear;
mod packed;
pub mod quant_config;
mod source;

pub use error::ImportError;
pub use linear::{is_quantized_linear, read_linear};
pub use quant_config::{quant_config, ImportMethod, QuantConfig};
pub use source::QuantizedCheckpoint;
