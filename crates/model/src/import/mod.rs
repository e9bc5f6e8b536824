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
mod packed;
pub mod quant_config;
mod source;

pub use error::ImportError;
pub use quant_config::{quant_config, ImportMethod, QuantConfig};
pub use source::QuantizedCheckpoint;

use crate::quantize::GroupQuant;
use crate::weights::safetensors::SafetensorsCheckpoint;

/// Whether the linear `prefix` (e.g. `"model.layers.0.self_attn.q_proj"`) is stored packed,
/// i.e. `<prefix>.qweight` exists.
pub fn is_quantized_linear(ckpt: &SafetensorsCheckpoint, prefix: &str) -> bool {
    ckpt.contains(&format!("{prefix}.qweight"))
}

/// Unpack the quantized linear `prefix` of a checkpoint described by `cfg`. `rows` and `cols`
/// are the output and input features the architecture expects; every packed tensor's dtype and
/// shape is checked against them.
pub fn read_linear(
    ckpt: &SafetensorsCheckpoint,
    cfg: &QuantConfig,
    prefix: &str,
    rows: usize,
    cols: usize,
) -> Result<GroupQuant, ImportError> {
    match cfg.method {
        ImportMethod::Awq => awq::read(ckpt, cfg, prefix, rows, cols),
        ImportMethod::Gptq => gptq::read(ckpt, cfg, prefix, rows, cols),
    }
}
