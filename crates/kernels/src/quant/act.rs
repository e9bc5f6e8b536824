//! Activation quantization: converting an `f32` activation row into an [`ActFormat`].
//!
//! The F32, Q8_0 and Q8_1 quantizers live here; Q8_K lives beside the K-quants in `q8_k.rs`.

use std::sync::OnceLock;

use super::ActFormat;
use crate::cpu::Isa;

/// Quantizers for every [`ActFormat`], indexed by `ActFormat as usize`.
pub struct ActKernels {
    pub quantize: [fn(&[f32], &mut [u8]); 4],
}

impl ActKernels {
    /// The fastest quantizers `isa` can run.
    pub fn for_isa(isa: Isa) -> ActKernels {
        ActKernels {
            quantize: [
                quantize_f32,
                quantize_q8_0_for(isa),
                quantize_q8_1_for(isa),
                super::q8_k::quantize_for(isa),
            ],
        }
    }
}

/// The quantizers for this CPU, chosen once.
pub fn kernels() -> &'static ActKernels {
    static K: OnceLock<ActKernels> = OnceLock::new();
    K.get_or_init(|| ActKernels::for_isa(Isa::detected()))
}

const _: () = assert!(ActFormat::F32 as usize == 0 && ActFormat::Q8K as usize == 3);

fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.iter().zip(dst.chunks_exact_mut(4)) {
        out.copy_from_slice(&x.to_le_bytes());
    }
}

fn quantize_q8_0_for(_isa: Isa) -> fn(&[f32], &mut [u8]) {
    unimplemented!("Q8_0 activation quantizer")
}

fn quantize_q8_1_for(_isa: Isa) -> fn(&[f32], &mut [u8]) {
    unimplemented!("Q8_1 activation quantizer")
}
