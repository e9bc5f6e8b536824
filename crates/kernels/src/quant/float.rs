//! Placeholder until the format lands.
use super::{DType, TypeKernels};
use crate::cpu::Isa;

pub fn kernels(_dtype: DType, _isa: Isa) -> TypeKernels {
    unimplemented!("float kernels")
}
