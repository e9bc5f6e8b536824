//! [`PackedKind`]: the weight types with a packed layout, and their per-block sizes.

use super::PANEL;
use crate::quant::{ActFormat, DType};

/// Weight types with a packed layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedKind {
    Q4_0,
    Q4_1,
    Q8_0,
}

impl PackedKind {
    /// The packed kind of `dtype`, if it has one.
    pub fn of(dtype: DType) -> Option<PackedKind> {
        match dtype {
            DType::Q4_0 => Some(PackedKind::Q4_0),
            DType::Q4_1 => Some(PackedKind::Q4_1),
            DType::Q8_0 => Some(PackedKind::Q8_0),
            _ => None,
        }
    }

    pub const fn dtype(self) -> DType {
        match self {
            PackedKind::Q4_0 => DType::Q4_0,
            PackedKind::Q4_1 => DType::Q4_1,
            PackedKind::Q8_0 => DType::Q8_0,
        }
    }

    /// The activation format the kernels consume (the GGUF kernels' one).
    pub const fn act(self) -> ActFormat {
        match self {
            PackedKind::Q4_1 => ActFormat::Q8_1,
            _ => ActFormat::Q8_0,
        }
    }

    /// What the stored unsigned quants exceed the signed ones by (0 for Q4_1, whose quants are
    /// unsigned in the file too and whose minimum is applied separately).
    pub(super) const fn offset(self) -> i32 {
        match self {
            PackedKind::Q4_0 => 8,
            PackedKind::Q4_1 => 0,
            PackedKind::Q8_0 => 128,
        }
    }

    /// Packed quant bytes of one block of a panel.
    pub(super) const fn quant_bytes(self) -> usize {
        match self {
            PackedKind::Q8_0 => 32 * PANEL,
            _ => 16 * PANEL,
        }
    }

    /// Scale bytes of one block of a panel (`f16` d per row; Q4_1 adds `f16` m per row).
    pub(super) const fn scale_bytes(self) -> usize {
        match self {
            PackedKind::Q4_1 => 4 * PANEL,
            _ => 2 * PANEL,
        }
    }
}
