//! Placeholder until the format lands.
use super::TypeKernels;
use crate::cpu::Isa;

pub fn kernels(_isa: Isa) -> TypeKernels {
    unimplemented!("q4_k kernels")
}
