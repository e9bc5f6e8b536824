//! Kestrel's offline model toolkit, on top of `kestrel-model`.
//!
//! * [`quantize`] — post-training quantization: [`quantize::QuantMethod`],
//!   [`quantize::quantize_model`] / [`quantize::quantize_with`] (calibrated AWQ, GPTQ,
//!   SmoothQuant, INT8 outlier channels) and [`quantize::in_situ::QuantizingSource`].
//! * [`codec`] — the stored encodings: [`codec::encode`], [`codec::GroupQuant`],
//!   [`codec::pack`].
//! * [`convert`] — GGUF ↔ HF checkpoints: [`convert::ModelSource`], [`convert::gguf_to_hf`],
//!   [`convert::hf_to_gguf`].
//! * [`import`] — community AWQ/GPTQ checkpoints: [`import::QuantizedCheckpoint`].
//! * [`load`] — [`load_model`] / [`load_model_with`]: the model crate's loader plus AWQ/GPTQ
//!   checkpoints and quantizing while loading ([`LoadOptions`], errors in [`LoadError`]).
//! * [`perplexity`] — perplexity and KL divergence as llama.cpp computes them.
//!
//! Modules depend on each other without cycles: [`plan`] and [`codec`] are leaves;
//! [`convert`] uses them; [`quantize`] uses [`convert`]; [`import`] uses [`codec`]; [`load`]
//! uses [`import`] and [`quantize`]; [`perplexity`] stands alone.

pub mod codec;
pub mod convert;
pub mod import;
pub mod load;
pub mod perplexity;
pub mod plan;
pub mod quantize;

pub use load::{load_model, load_model_with, LoadError, LoadOptions};
