//! Kestrel's CPU kernels: the only crate in the workspace that contains `unsafe` code.
//!
//! * [`quant`] — the GGUF tensor types ([`DType`]): block layouts, a scalar reference
//!   dequantize / dot product for each (the spec), SIMD variants, and the activation formats
//!   ([`ActFormat`]) that the integer dot products consume.
//! * [`cpu`] — ISA detection ([`cpu::Isa`]), the persistent thread pool, matrix products,
//!   element-wise ops and attention.
//! * [`heap`] — hands freed heap memory back to the system (after a model is unloaded).
//! * [`heap_stats`] — the C allocator's held and live bytes (the heap fragmentation gauge).
//!
//! SIMD variants are chosen once at run time from the detected ISA, never only by
//! `cfg(target_feature)`, and every variant is tested against its scalar reference.

pub mod alloc_count;
pub mod bytes;
pub mod cpu;
pub mod heap;
pub mod heap_stats;
pub mod huge_buffer;
pub mod quant;

pub use bytes::SharedBytes;
pub use quant::{ActFormat, DType, TypeKernels};
