//! [`read_linear`]: one packed AWQ/GPTQ linear of a checkpoint into a [`GroupQuant`];
//! [`is_quantized_linear`]: whether a linear is stored packed.

use kestrel_model::weights::safetensors::SafetensorsCheckpoint;

use super::{awq, gptq, ImportError, ImportMethod, QuantConfig};
use crate::codec::GroupQuant;

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
