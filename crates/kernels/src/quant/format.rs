//! [`QuantFormat`]: a block quant format described once — its `#[repr(C)]` block, the
//! activation block it is multiplied with, its scalar reference (the spec) and its ISA
//! variants — so that generic code (scalar row wrappers, tests, benchmarks) can treat every
//! block format alike.

use bytemuck::Pod;

use super::{ActFormat, DType, TypeKernels};
use crate::cpu::Isa;

/// A block quant format: every row is a whole number of [`QuantFormat::Block`]s, and a dot
/// product takes a weight row and an activation row of [`QuantFormat::Act`] blocks.
///
/// Implemented by the marker types [`Q4_0`](super::q4_0::Q4_0),
/// [`Q4_1`](super::q4_1::Q4_1), [`Q5_0`](super::q5_0::Q5_0), [`Q8_0`](super::q8_0::Q8_0),
/// [`Q5_1`](super::q5_1::Q5_1), [`Q2K`](super::q2_k::Q2K), [`Q3K`](super::q3_k::Q3K),
/// [`Q4K`](super::q4_k::Q4K), [`Q5K`](super::q5_k::Q5K), [`Q6K`](super::q6_k::Q6K),
/// [`Iq4Nl`](super::iq4_nl::Iq4Nl) and [`Iq4Xs`](super::iq4_xs::Iq4Xs).
pub trait QuantFormat {
    /// The `#[repr(C)]` weight block.
    type Block: Pod;
    /// The activation block the dot product takes.
    type Act: Pod;
    /// The tensor type.
    const DTYPE: DType;
    /// The activation format of [`QuantFormat::Act`] rows.
    const ACT: ActFormat;
    /// Reference quantization of `x` (a whole number of blocks).
    fn quantize_ref(x: &[f32]) -> Vec<Self::Block>;
    /// Reference dequantization (the spec).
    fn dequantize_ref(w: &[Self::Block], out: &mut [f32]);
    /// Reference dot product of a weight row with an activation row (the spec).
    fn vec_dot_ref(w: &[Self::Block], a: &[Self::Act]) -> f32;
    /// Reference quantization of an activation row into [`QuantFormat::Act`] blocks.
    fn quantize_act_ref(x: &[f32]) -> Vec<Self::Act>;
    /// The fastest kernels that `isa` (capped to what this CPU runs) allows.
    fn kernels(isa: Isa) -> TypeKernels;
}

/// Declares the marker type `$name` of the format whose module defines `quantize_ref`,
/// `dequantize_ref`, `vec_dot_ref` and `kernels`, and implements [`QuantFormat`] for it.
macro_rules! quant_format {
    (
        $(#[$doc:meta])*
        $name:ident { block: $block:ty, act: $act:ty, dtype: $dtype:expr,
                      act_format: $act_format:expr, quantize_act: $quantize_act:path $(,)? }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;

        impl $crate::quant::format::QuantFormat for $name {
            type Block = $block;
            type Act = $act;
            const DTYPE: $crate::quant::DType = $dtype;
            const ACT: $crate::quant::ActFormat = $act_format;
            fn quantize_ref(x: &[f32]) -> Vec<$block> {
                quantize_ref(x)
            }
            fn dequantize_ref(w: &[$block], out: &mut [f32]) {
                dequantize_ref(w, out)
            }
            fn vec_dot_ref(w: &[$block], a: &[$act]) -> f32 {
                vec_dot_ref(w, a)
            }
            fn quantize_act_ref(x: &[f32]) -> Vec<$act> {
                $quantize_act(x)
            }
            fn kernels(isa: $crate::cpu::Isa) -> $crate::quant::TypeKernels {
                kernels(isa)
            }
        }
    };
}

pub(crate) use quant_format;
