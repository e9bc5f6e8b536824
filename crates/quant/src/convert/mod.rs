//! Converting between GGUF files and Hugging Face checkpoint directories (Llama family).
//!
//! * [`ModelSource`]: a GGUF file or an HF directory seen as GGUF-named tensors plus GGUF
//!   metadata; HF Q/K rows are permuted into GGUF order on the way ([`permute`]).
//! * [`gguf_to_hf`]: GGUF (any supported type, dequantized) → `config.json`,
//!   `model.safetensors` (HF names, Q/K rows un-permuted), `tokenizer.json`,
//!   `tokenizer_config.json` and `generation_config.json`.
//! * [`hf_to_gguf`]: HF directory → GGUF with llama metadata, tokenizer metadata and
//!   F32/F16/BF16 tensors (1-D tensors always F32).
//! * [`LoraMerge`]: either direction with a LoRA adapter folded into the weights.

mod error;
mod float_type;
mod hf_config;
mod llama_meta;
mod lora_merge;
mod names;
mod source;
mod to_gguf;
mod to_hf;
mod tokenizer_meta;

pub use error::ConvertError;
pub use float_type::FloatType;
pub use lora_merge::LoraMerge;
pub use names::NameMap;
pub use source::{ModelSource, SourceTensor};
pub use to_gguf::{hf_to_gguf, hf_to_gguf_merged, retype, retype_with, write_file};
pub use to_hf::{gguf_to_hf, gguf_to_hf_merged};
