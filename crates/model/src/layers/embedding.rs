//! [`Embedding`]: token id → hidden vector, dequantizing one row of a (possibly quantized) table.

use crate::error::ModelError;
use crate::layers::Linear;
use crate::weights::TensorView;

/// A `[vocab, hidden]` table. It shares its storage with the output head when the model ties
/// them, so it is stored as a [`Linear`].
#[derive(Debug, Clone)]
pub struct Embedding {
    table: Linear,
}

impl Embedding {
    pub fn new(view: TensorView) -> Result<Embedding, ModelError> {
        Ok(Embedding {
            table: Linear::new(view, None)?,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.table.rows()
    }

    pub fn hidden_size(&self) -> usize {
        self.table.cols()
    }

    /// The table viewed as a linear layer (for tied output heads).
    pub fn as_linear(&self) -> &Linear {
        &self.table
    }

    /// Write the embeddings of `tokens` into consecutive rows of `out`.
    /// The caller has validated every token id against [`Embedding::vocab_size`].
    pub fn forward(&self, tokens: &[u32], out: &mut [f32]) {
        let h = self.hidden_size();
        for (t, row) in tokens.iter().zip(out.chunks_exact_mut(h)) {
            self.table.dequantize_row(*t as usize, row);
        }
    }
}
