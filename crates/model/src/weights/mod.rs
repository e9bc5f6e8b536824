//! Reading weight files: GGUF ([`gguf::GgufFile`]) and HF safetensors checkpoints
//! ([`safetensors::SafetensorsCheckpoint`]). Both hand tensors out as [`TensorView`]s through the
//! [`TensorSource`] trait so the architectures load from either without caring which.

use kestrel_kernels::{DType, SharedBytes};

pub mod digest;
pub mod fused;
pub mod gguf;
pub mod safetensors;

pub use fused::FusedSplit;

/// One tensor: its element type, its shape in row-major order (outermost dimension first, so a
/// `[out_features, in_features]` matrix has `shape == [rows, cols]`), and its raw bytes.
#[derive(Debug, Clone)]
pub struct TensorView {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: SharedBytes,
}

impl TensorView {
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Anything that can hand out named tensors.
pub trait TensorSource {
    /// The tensor called `name` (in the source's own naming), if present.
    fn tensor(&self, name: &str) -> Option<TensorView>;
    /// All tensor names, in file order.
    fn tensor_names(&self) -> Vec<String>;
    /// For a matrix stored with permuted input columns (GPTQ act-order): stored column `j`
    /// holds input column `perm[j]`.
    fn input_perm(&self, _name: &str) -> Option<Vec<u32>> {
        None
    }
    /// For a matrix whose outlier input channels are stored apart (INT8 with outlier
    /// decomposition): the channels, in stored column order. Their weights are the tensor
    /// named by [`outlier_weight_name`].
    fn outlier_columns(&self, _name: &str) -> Option<Vec<u32>> {
        None
    }
}

/// The tensor holding the outlier-channel weights of matrix `name` (`….weight` →
/// `….outlier_weight`).
pub fn outlier_weight_name(name: &str) -> String {
    format!(
        "{}.outlier_weight",
        name.strip_suffix(".weight").unwrap_or(name)
    )
}
