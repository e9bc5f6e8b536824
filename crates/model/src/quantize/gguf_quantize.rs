//! [`quantize_model`]: a whole model to a GGUF file of one [`QuantMethod`], keeping the
//! source's metadata (tokenizer included) and rewriting only the type keys.

use kestrel_kernels::DType;

use super::{QuantMethod, QuantizeError};
use crate::convert::{ModelSource, SourceTensor};
use crate::weights::gguf::GgufWriter;

/// What happened to one tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPlan {
    pub name: String,
    /// Row-major shape.
    pub shape: Vec<usize>,
    pub from: DType,
    pub to: DType,
    /// Seconds spent converting it.
    pub seconds: f64,
}

/// Quantize every tensor of `source` as `method` says (see [`QuantMethod::tensor_type`]);
/// `on_tensor` is called after each one (for progress reporting).
pub fn quantize_model(
    source: &ModelSource,
    method: QuantMethod,
    on_tensor: &mut dyn FnMut(&TensorPlan),
) -> Result<GgufWriter, QuantizeError> {
    let rule = |t: &SourceTensor| method.tensor_type(&t.name, t.shape());
    Ok(crate::convert::retype(
        source,
        &rule,
        method.file_type(),
        on_tensor,
    )?)
}
