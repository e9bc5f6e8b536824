//! The stored encodings the quantizers produce, below every other module of the crate:
//!
//! * [`GroupQuant`]: integer codes with per-group scales and zero points.
//! * [`rtn`]: round-to-nearest onto a group's grid (the building block of AWQ and GPTQ).
//! * [`pack`]: a [`GroupQuant`] into the bytes of Kestrel's INT4_G* / INT8 types.
//! * [`encode`] / [`encode_rows`] / [`encode_threads`]: `f32` values to the bytes of any
//!   supported [`DType`](kestrel_kernels::DType) (reference quantizers, rows spread over
//!   threads).

mod encode;
pub mod group;
mod pack;
pub mod rtn;

pub use encode::{encode, encode_rows, encode_threads, Encoded};
pub use group::GroupQuant;
pub use pack::{pack, PackError, PackedLinear};
