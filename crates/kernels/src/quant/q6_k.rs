//! Placeholder until the format lands.
use super::TypeKernels;
use crate::cpu::Isa;

pub fn kernels(_isa: Isa) -> TypeKernels {
    unimplemented!("q6_k kernels")
}
