//! [`quantize_model`]: a whole model to a GGUF file of one [`QuantMethod`], keeping the
//! source's metadata (tokenizer included) and rewriting only the type keys.

use kestrel_model::weights::gguf::GgufWriter;

use super::{QuantMethod, QuantizeError};
use crate::convert::{ModelSource, SourceTensor};
use crate::plan::TensorPlan;

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
