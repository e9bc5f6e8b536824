//! [`RawLora`]: an adapter as read from its file, before it is fitted to a base model: A/B
//! pairs per (layer, module) with their scale, in the row order of the format that wrote them.

use super::error::LoraError;
use super::target::LoraModule;
use crate::weights::TensorView;

/// Which format the adapter came from; it decides the row order of its Q/K deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoraSource {
    /// A PEFT directory: Hugging Face row order.
    Peft,
    /// A llama.cpp adapter GGUF: Q/K rows in llama.cpp's order for the architecture (permuted
    /// for interleaved RoPE, like the base GGUF's weights).
    LlamaCpp,
}

/// One low-rank pair: `ΔW = scale · B · A`, `A: [rank, in]`, `B: [out, rank]`, as `f32`.
#[derive(Debug, Clone)]
pub struct RawPair {
    pub layer: usize,
    pub module: LoraModule,
    /// The name of A in the file (for messages).
    pub name: String,
    pub rank: usize,
    pub cols: usize,
    pub rows: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub scale: f32,
}

/// An adapter as read from disk.
#[derive(Debug, Clone)]
pub struct RawLora {
    pub source: LoraSource,
    pub pairs: Vec<RawPair>,
}

impl RawLora {
    /// An adapter of `pairs` read from `source`; one without any pair is refused.
    pub fn new(source: LoraSource, pairs: Vec<RawPair>) -> Result<RawLora, LoraError> {
        if pairs.is_empty() {
            return Err(LoraError::Empty);
        }
        Ok(RawLora { source, pairs })
    }
}

/// The `f32` values of an adapter tensor (F32, F16 or BF16) and its `[rows, cols]` shape.
pub fn matrix_f32(view: &TensorView) -> Result<(Vec<f32>, [usize; 2]), LoraError> {
    use kestrel_kernels::DType;
    if !matches!(view.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(LoraError::UnsupportedDtype {
            tensor: view.name.clone(),
            dtype: view.dtype.to_string(),
        });
    }
    let bad = |reason: String| LoraError::BadTensor {
        tensor: view.name.clone(),
        reason,
    };
    let [rows, cols] = view.shape[..] else {
        return Err(bad(format!(
            "expected a matrix, got shape {:?}",
            view.shape
        )));
    };
    let values = crate::layers::to_f32_vec(view).map_err(|e| bad(e.to_string()))?;
    Ok((values, [rows, cols]))
}

/// Pair A (`[rank, in]`) with B (`[out, rank]`), checking that their ranks agree with each
/// other and with `rank` where the format declares one.
pub fn pair(
    (layer, module): (usize, LoraModule),
    a: &TensorView,
    b: &TensorView,
    declared_rank: Option<usize>,
    scale_for_rank: impl Fn(usize) -> f32,
) -> Result<RawPair, LoraError> {
    let (a_vals, [rank, cols]) = matrix_f32(a)?;
    let (b_vals, [rows, b_rank]) = matrix_f32(b)?;
    let expected = declared_rank.unwrap_or(rank);
    for (tensor, actual) in [(&a.name, rank), (&b.name, b_rank)] {
        if actual != expected {
            return Err(LoraError::RankMismatch {
                tensor: tensor.clone(),
                expected,
                actual,
            });
        }
    }
    if rank == 0 {
        return Err(LoraError::RankMismatch {
            tensor: a.name.clone(),
            expected,
            actual: 0,
        });
    }
    Ok(RawPair {
        layer,
        module,
        name: a.name.clone(),
        rank,
        cols,
        rows,
        a: a_vals,
        b: b_vals,
        scale: scale_for_rank(rank),
    })
}
