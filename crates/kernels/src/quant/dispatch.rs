//! The run-time choice of a format's ISA variant, the same for every format.
//!
//! A format lists its variants once with [`select_variant!`]: the scalar reference wrappers,
//! then the AVX2 and AVX-512 VNNI entry points. Those entry points are safe
//! `#[target_feature]` functions taking slices; the macro wraps each in a plain `fn` with the
//! one `unsafe` call, in the arm that only runs when the CPU supports the ISA
//! ([`capped`]: the requested ISA, capped by [`Isa::supported`]; the crate-wide choice
//! starts from [`Isa::detected`], which `KESTREL_ISA` caps).

use super::{ActFormat, DType, TypeKernels, VecDotRowsFn, VecDotTileFn};
use crate::cpu::Isa;

/// Dequantize a row: `src` holds the blocks of `dst.len()` elements.
pub(crate) type DequantizeFn = fn(&[u8], &mut [f32]);
/// Dot product of `n` elements of a weight row and an activation row.
pub(crate) type VecDotFn = fn(usize, &[u8], &[u8]) -> f32;

/// The functions of one ISA variant of a format: a [`TypeKernels`] without its format.
#[derive(Clone, Copy)]
pub(crate) struct Variant {
    pub isa: Isa,
    pub dequantize: DequantizeFn,
    pub vec_dot: VecDotFn,
    pub vec_dot_tile: Option<VecDotTileFn>,
    pub vec_dot_rows: Option<VecDotRowsFn>,
}

impl Variant {
    /// The scalar variant: the reference kernels, no multi-row kernels.
    pub(crate) const fn scalar(dequantize: DequantizeFn, vec_dot: VecDotFn) -> Variant {
        Variant {
            isa: Isa::Scalar,
            dequantize,
            vec_dot,
            vec_dot_tile: None,
            vec_dot_rows: None,
        }
    }

    /// These functions as the kernels of `dtype`, multiplied with `act` activations.
    pub(crate) const fn kernels(self, dtype: DType, act: ActFormat) -> TypeKernels {
        TypeKernels {
            dtype,
            isa: self.isa,
            act,
            dequantize: self.dequantize,
            vec_dot: self.vec_dot,
            vec_dot_tile: self.vec_dot_tile,
            vec_dot_rows: self.vec_dot_rows,
        }
    }
}

/// The strongest ISA that is both `<= isa` and runnable on this CPU. Every variant choice
/// goes through this, which is what makes handing out the SIMD variants sound.
pub(crate) fn capped(isa: Isa) -> Isa {
    isa.min(Isa::supported())
}

/// The [`Variant`] for `isa` (capped to what this CPU runs):
///
/// ```ignore
/// select_variant!(isa,
///     scalar: Variant::scalar(dequantize_scalar, vec_dot_scalar),
///     avx2: { dequantize: x86::dequantize_avx2, vec_dot: x86::vec_dot_avx2 },
///     avx512: { vec_dot: x86::vec_dot_avx512, vec_dot_tile: x86::tile_avx512 },
/// )
/// ```
///
/// Each SIMD arm names `#[target_feature]` functions for its slots ([`set_slot!`] lists
/// them); slots it leaves out keep the scalar variant's function.
macro_rules! select_variant {
    (
        $isa:expr,
        scalar: $scalar:expr,
        avx2: { $($ak:ident: $av:expr),* $(,)? },
        avx512: { $($bk:ident: $bv:expr),* $(,)? } $(,)?
    ) => {{
        let scalar: $crate::quant::dispatch::Variant = $scalar;
        match $crate::quant::dispatch::capped($isa) {
            #[cfg(target_arch = "x86_64")]
            $crate::cpu::Isa::Avx2 => {
                let mut v = scalar;
                v.isa = $crate::cpu::Isa::Avx2;
                $($crate::quant::dispatch::set_slot!(v, $ak, $av);)*
                v
            }
            #[cfg(target_arch = "x86_64")]
            $crate::cpu::Isa::Avx512Vnni => {
                let mut v = scalar;
                v.isa = $crate::cpu::Isa::Avx512Vnni;
                $($crate::quant::dispatch::set_slot!(v, $bk, $bv);)*
                v
            }
            _ => scalar,
        }
    }};
}

/// Sets slot `$slot` of variant `$v` to a plain `fn` that calls the `#[target_feature]`
/// function `$f`. Only [`select_variant!`] uses it, in the arm of an ISA the CPU runs.
///
/// Slots: `dequantize`, `vec_dot`, `vec_dot_tile`, `vec_dot_rows` (byte-row functions with
/// the [`TypeKernels`] signatures), and `kquant_dequantize`, `kquant_vec_dot` (functions of
/// K-quant blocks and Q8_K blocks, given the rows viewed as blocks).
macro_rules! set_slot {
    ($v:ident, dequantize, $f:expr) => {
        $v.dequantize = |src, dst| {
            // SAFETY: set only in the `select_variant!` arm of an ISA that this CPU supports
            // (`capped`), whose features are the ones `$f` enables.
            unsafe { $f(src, dst) }
        };
    };
    ($v:ident, vec_dot, $f:expr) => {
        $v.vec_dot = |n, w, a| {
            // SAFETY: as for `dequantize`: the CPU supports the features `$f` enables.
            unsafe { $f(n, w, a) }
        };
    };
    ($v:ident, vec_dot_tile, $f:expr) => {
        let tile: $crate::quant::VecDotTileFn = |n, w, a| {
            // SAFETY: as for `dequantize`: the CPU supports the features `$f` enables.
            unsafe { $f(n, w, a) }
        };
        $v.vec_dot_tile = Some(tile);
    };
    ($v:ident, vec_dot_rows, $f:expr) => {
        let rows: $crate::quant::VecDotRowsFn = |n, w, a| {
            // SAFETY: as for `dequantize`: the CPU supports the features `$f` enables.
            unsafe { $f(n, w, a) }
        };
        $v.vec_dot_rows = Some(rows);
    };
    ($v:ident, kquant_dequantize, $f:expr) => {
        $v.dequantize = |src, dst| {
            let blocks = $crate::quant::q8_k::weight_blocks(src, dst.len());
            // SAFETY: as for `dequantize`: the CPU supports the features `$f` enables.
            unsafe { $f(blocks, dst) }
        };
    };
    ($v:ident, kquant_vec_dot, $f:expr) => {
        $v.vec_dot = |n, w, a| {
            let (w, a) = $crate::quant::q8_k::split_row(n, w, a);
            // SAFETY: as for `dequantize`: the CPU supports the features `$f` enables.
            unsafe { $f(w, a) }
        };
    };
}

pub(crate) use {select_variant, set_slot};
