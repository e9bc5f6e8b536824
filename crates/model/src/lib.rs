//! Kestrel's model side: weight files, tokenizer, chat template, layers and architectures.
//!
//! * [`weights`] — GGUF and safetensors readers behind [`weights::TensorSource`].
//! * [`config`] — [`config::ModelConfig`], read from GGUF metadata or HF `config.json`.
//! * [`families`] — one file per model family and their registry; [`config::Architecture`]
//!   is a handle onto one entry.
//! * [`tokenizer`] — [`tokenizer::Tokenizer`] from GGUF metadata or `tokenizer.json`.
//! * [`chat_template`] — [`chat_template::ChatTemplate`], HF-compatible Jinja via minijinja.
//! * [`loader`] — [`load_model`] into a [`LoadedModel`]; [`load_model_using`] with a
//!   [`BuildModel`] that decides how the opened [`Weights`] become the model.
//! * [`lora`] — LoRA adapters: PEFT and llama.cpp GGUF formats, [`lora::LoraRegistry`], and
//!   per-row application in a mixed batch ([`lora::LoraBatch`]).
//! * [`runner`] — [`ModelRunner`], the model behind the engine's executor interface.
//!
//! Quantization, conversion, AWQ/GPTQ import and perplexity live in `kestrel-quant`.

pub mod arch;
pub mod chat_prompt;
pub mod chat_template;
pub mod config;
pub mod engine_builder;
pub mod error;
pub mod families;
pub mod fuzz_entry;
pub mod kv_cache;
pub mod layers;
pub mod loader;
pub mod lora;
pub mod qk_rows;
pub mod runner;
pub mod tokenizer;
pub mod turn_folding;
pub mod weights;

pub use error::ModelError;
/// Re-exported so the model's users (server, CLI) configure the KV cache and threads without
/// depending on the kernels crate.
pub use kestrel_kernels::cpu::attention::KvDtype;
pub use kestrel_kernels::cpu::threadpool::ThreadPool;
pub use loader::{
    load_model, load_model_using, AsStored, BuildModel, LoadedModel, ModelFormat, Weights,
};
pub use runner::ModelRunner;
