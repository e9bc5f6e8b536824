//! [`GroupQuant`]: a weight matrix as integer codes with per-group scales and zero points, the
//! common form of every group-wise method (RTN, AWQ, GPTQ) and of imported AWQ/GPTQ checkpoints,
//! before it is packed into a Kestrel tensor type.

/// A `[rows, cols]` matrix quantized to unsigned `bits`-bit codes in groups of `group_size`
/// consecutive *stored* columns:
///
/// ```text
/// w[r][perm[j]] = scales[r][j / group_size] * (codes[r][j] - zeros[r][j / group_size])
/// ```
///
/// where `j` is the stored column and `perm` is the identity unless the matrix was quantized in
/// activation order (GPTQ `desc_act`), in which case stored column `j` holds original input
/// column `perm[j]` and the activations must be gathered the same way before the product.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupQuant {
    pub rows: usize,
    pub cols: usize,
    /// Bits per code (4 or 8).
    pub bits: u8,
    /// Columns per group; `cols` is a multiple of it.
    pub group_size: usize,
    /// Codes, row-major `[rows][cols]`, in stored column order, each `< 2^bits`.
    pub codes: Vec<u8>,
    /// Scales, `[rows][cols / group_size]`.
    pub scales: Vec<f32>,
    /// Integer zero points, `[rows][cols / group_size]`, each `< 2^bits`.
    pub zeros: Vec<u8>,
    /// Stored column → original column, when not the identity.
    pub perm: Option<Vec<u32>>,
}

impl GroupQuant {
    /// Groups per row.
    pub fn groups(&self) -> usize {
        self.cols / self.group_size
    }

    /// The matrix in `f32`, original column order (for checks and for dequantizing formats
    /// Kestrel has no kernel for).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.rows * self.cols];
        let g = self.groups();
        for r in 0..self.rows {
            for j in 0..self.cols {
                let gi = r * g + j / self.group_size;
                let col = self.perm.as_ref().map_or(j, |p| p[j] as usize);
                let q = self.codes[r * self.cols + j] as f32 - self.zeros[gi] as f32;
                out[r * self.cols + col] = self.scales[gi] * q;
            }
        }
        out
    }
}
