//! [`TensorPlan`]: what happened to one tensor of a converted or quantized model, reported
//! to progress callbacks and returned by the converters.

use kestrel_kernels::DType;

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
