//! Kestrel's model side: weight files, tokenizer, chat template, layers and architectures.
//!
//! * [`weights`] — GGUF and safetensors readers behind [`weights::TensorSource`].
//! * [`config`] — [`config::ModelConfig`], read from GGUF metadata or HF `config.json`.
//! * [`tokenizer`] — [`tokenizer::Tokenizer`] from GGUF metadata or `tokenizer.json`.
//! * [`chat_template`] — [`chat_template::ChatTemplate`], HF-compatible Jinja via minijinja.

pub mod chat_template;
pub mod config;
pub mod tokenizer;
pub mod weights;
