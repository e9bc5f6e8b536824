//! Post-training quantization to the GGUF block types and Kestrel's own types.
//!
//! * [`QuantMethod`]: the target (`q8_0`, `q4_0`, `q4_1`, `q4_k`, `q6_k`, `int8`, `int4`,
//!   `awq`, `gptq`, `nf4`) and the per-tensor type rule [`QuantMethod::tensor_type`]: 1-D
//!   tensors (norms, biases) stay F32; the token embedding and the output head get Q8_0 for
//!   `q8_0` and Q6_K for the others; every other matrix gets the method's type. A row length
//!   that is not a whole number of blocks falls back as llama.cpp does (Q4_K → Q5_0, Q6_K →
//!   Q8_0, then F16).
//! * [`quantize_model`]: a [`ModelSource`](crate::convert::ModelSource) (GGUF or HF directory)
//!   to a [`GgufWriter`](kestrel_model::weights::gguf::GgufWriter) holding the quantized model;
//!   [`quantize_with`] adds calibration (AWQ, GPTQ, SmoothQuant, INT8 outlier channels), each
//!   method's steps behind one `QuantizeMethod` implementation (`quantize_method/`).
//! * [`in_situ::QuantizingSource`]: quantize while a model loads (`kestrel serve --quantize`).
//! * The encoders ([`encode`], [`pack`], [`GroupQuant`], [`rtn`]) live in [`crate::codec`]
//!   and are re-exported here.

pub mod attn_weights;
pub mod awq;
pub mod calib;
mod error;
mod fold;
mod gguf_quantize;
pub mod gptq;
pub mod in_situ;
pub mod linalg;
mod method;
pub mod outliers;
mod quantize_method;
mod toolkit;

pub use crate::codec::{encode, encode_rows, encode_threads, group, pack, rtn, GroupQuant};
pub use crate::plan::TensorPlan;
pub use error::QuantizeError;
pub use gguf_quantize::quantize_model;
pub use method::{fitting_type, QuantMethod, QuantOptions, Smoothing};
pub use toolkit::{quantize_with, CalibText, Progress, METHOD_KEY};
