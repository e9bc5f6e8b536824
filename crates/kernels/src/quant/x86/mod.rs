//! x86-64 SIMD building blocks shared by the quant formats' kernels, one concern per module.
//!
//! Functions that take slices are safe `#[target_feature]` functions (bounds-checked loads);
//! the few that take raw pointers are `unsafe fn`s whose callers address whole blocks. All of
//! them require the features they enable, which the caller's own `#[target_feature]` (or the
//! dispatch in [`super::dispatch`]) guarantees.

pub(crate) mod iq;
pub(crate) mod kscales;
pub(crate) mod load;
pub(crate) mod nibbles;
pub(crate) mod offset;
pub(crate) mod offset_tile;
pub(crate) mod q8;
pub(crate) mod reduce;
pub(crate) mod scale_min;
pub(crate) mod signed_rows;
pub(crate) mod tile;
pub(crate) mod tile_scales;
