//! [`ModelError`]: everything that can go wrong loading or running a model.

use crate::config::ConfigError;
use crate::tokenizer::TokenizerError;
use crate::weights::gguf::GgufError;
use crate::weights::safetensors::SafetensorsError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("tensor `{0}` is missing from the model file")]
    MissingTensor(String),
    #[error("tensor `{name}` has shape {actual:?}, expected {expected:?}")]
    BadShape {
        name: String,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },
    #[error("tensor `{name}`: {reason}")]
    BadTensor { name: String, reason: String },
    #[error("unsupported architecture `{0}` (supported: {list})", list = crate::families::supported_names())]
    UnsupportedArchitecture(String),
    #[error("chat template: {0}")]
    ChatTemplate(String),
    #[error(transparent)]
    Lora(#[from] crate::lora::LoraError),
    #[error("cannot read model at {path}: {reason}")]
    Unreadable { path: String, reason: String },
}
