//! CPU execution: ISA dispatch, thread pool, matrix products, element-wise ops, attention.

pub mod dispatch;

pub use dispatch::Isa;
