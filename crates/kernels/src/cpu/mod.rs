//! CPU execution: ISA dispatch, thread pool, matrix products, element-wise ops, attention.

pub mod attention;
mod bf16_dot;
pub mod bf16_tiles;
pub mod dispatch;
pub mod gemm;
pub mod low_rank;
pub mod ops;
pub mod packed;
mod prefetch;
pub mod threadpool;
mod work_ranges;

pub use dispatch::Isa;
pub use threadpool::ThreadPool;
pub(crate) use work_ranges::WorkRanges;
