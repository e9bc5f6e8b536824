//! [`PackedKind`]: the weight types with a packed layout, and their per-block sizes.

use super::PANEL;
use crate::quant::{ActFormat, DType};

/// Weight types with a packed layout (named as the GGUF types are).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedKind {
    Q4_0,
    Q4_1,
    Q8_0,
    Q4_K,
    Q6_K,
}

impl PackedKind {
    /// The packed kind of `dtype`, if it has one.
    pub fn of(dtype: DType) -> Option<PackedKind> {
        match dtype {
            DType::Q4_0 => Some(PackedKind::Q4_0),
            DType::Q4_1 => Some(PackedKind::Q4_1),
            DType::Q8_0 => Some(PackedKind::Q8_0),
            DType::Q4_K => Some(PackedKind::Q4_K),
            DType::Q6_K => Some(PackedKind::Q6_K),
            _ => None,
        }
    }

    pub const fn dtype(self) -> DType {
        match self {
            PackedKind::Q4_0 => DType::Q4_0,
            PackedKind::Q4_1 => DType::Q4_1,
            PackedKind::Q8_0 => DType::Q8_0,
            PackedKind::Q4_K => DType::Q4_K,
            PackedKind::Q6_K => DType::Q6_K,
        }
    }

    /// Elements per block: 32, or a 256-element super-block for the K-quants.
    pub const fn block_elems(self) -> usize {
        match self {
            PackedKind::Q4_K | PackedKind::Q6_K => 256,
            _ => 32,
        }
    }

    /// The activation format the kernels consume (the GGUF kernels' one).
    pub const fn act(self) -> ActFormat {
        match self {
            PackedKind::Q4_1 => ActFormat::Q8_1,
            PackedKind::Q4_K | PackedKind::Q6_K => ActFormat::Q8K,
            _ => ActFormat::Q8_0,
        }
    }

    /// What the stored unsigned quants exceed the signed ones by (0 for Q4_1 and Q4_K, whose
    /// quants are unsigned in the file too and whose minimum is applied separately).
    pub(super) const fn offset(self) -> i32 {
        match self {
            PackedKind::Q4_0 => 8,
            PackedKind::Q4_1 | PackedKind::Q4_K => 0,
            PackedKind::Q8_0 => 128,
            PackedKind::Q6_K => 32,
        }
    }

    /// Packed quant bytes of one block of a panel.
    pub(super) const fn quant_bytes(self) -> usize {
        match self {
            PackedKind::Q8_0 => 32 * PANEL,
            PackedKind::Q4_K => 128 * PANEL,
            PackedKind::Q6_K => 192 * PANEL,
            _ => 16 * PANEL,
        }
    }

    /// Scale bytes of one block of a panel (`f16` d per row; Q4_1 adds `f16` m per row; Q4_K
    /// has 12 packed scale bytes, `f16` d and `f16` dmin per row; Q6_K 16 `i8` scales and `f16`
    /// d per row).
    pub(super) const fn scale_bytes(self) -> usize {
        match self {
            PackedKind::Q4_1 => 4 * PANEL,
            PackedKind::Q4_K => 16 * PANEL,
            PackedKind::Q6_K => 18 * PANEL,
            _ => 2 * PANEL,
        }
    }
}
