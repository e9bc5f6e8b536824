//! Building blocks of a transformer forward pass. Quantization is a property of [`Linear`]:
//! the same layer code runs F32, BF16 and every quantized type.

pub mod block_norm;
pub mod embedding;
pub mod layer_norm;
pub mod linear;
pub mod norm;
pub mod outlier_columns;
pub mod rotary;
pub mod weight_matrix;

pub use block_norm::BlockNorm;
pub use embedding::Embedding;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use norm::RmsNorm;
pub use outlier_columns::OutlierColumns;
pub use rotary::Rotary;
pub use weight_matrix::WeightMatrix;

/// Dequantize a whole (small) tensor, e.g. a norm weight or bias, to `f32`.
pub fn to_f32_vec(view: &crate::weights::TensorView) -> Result<Vec<f32>, crate::error::ModelError> {
    let n = view.n_elements();
    let expected = view.dtype.row_bytes(n);
    if expected != Some(view.data.len()) {
        return Err(crate::error::ModelError::BadTensor {
            name: view.name.clone(),
            reason: format!(
                "{} bytes of {} data for {n} elements",
                view.data.len(),
                view.dtype
            ),
        });
    }
    let mut out = vec![0.0; n];
    kestrel_kernels::quant::dequantize_row(view.dtype, &view.data, &mut out);
    Ok(out)
}
