//! [`LoraError`]: why an adapter could not be read, or does not fit the base model.

use std::path::PathBuf;

use crate::weights::gguf::GgufError;
use crate::weights::safetensors::SafetensorsError;

#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    #[error("cannot read LoRA adapter at {path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{dir} holds only adapter_model.bin (a pickled PyTorch file); Kestrel reads adapters as adapter_model.safetensors only: re-save it with safe_serialization=True")]
    PickleOnly { dir: PathBuf },
    #[error("LoRA adapter_config.json: {0}")]
    BadConfig(String),
    #[error("the adapter trains and saves whole modules ({0:?}, `modules_to_save`); only low-rank deltas are supported")]
    ModulesToSave(Vec<String>),
    #[error("DoRA adapters (`use_dora: true`) are not supported")]
    Dora,
    #[error("LoRA target module `{0}` is not supported (supported: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, qkv_proj, gate_up_proj)")]
    UnknownTarget(String),
    #[error("LoRA tensor `{tensor}` has rank {actual}, the adapter declares rank {expected}")]
    RankMismatch {
        tensor: String,
        expected: usize,
        actual: usize,
    },
    #[error(
        "LoRA tensor `{tensor}` has shape {actual:?}, expected {expected:?} for this base model"
    )]
    ShapeMismatch {
        tensor: String,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },
    #[error("LoRA tensor `{tensor}` is stored as {dtype}; adapters must be F32, F16 or BF16")]
    UnsupportedDtype { tensor: String, dtype: String },
    #[error("LoRA tensor `{tensor}`: {reason}")]
    BadTensor { tensor: String, reason: String },
    #[error("LoRA tensor `{0}` has no matching A/B partner")]
    Unpaired(String),
    #[error("the adapter targets layer {layer} `{module}`, which the base model does not have")]
    NotInBase { layer: usize, module: String },
    #[error("{0} is not a llama.cpp LoRA adapter GGUF (expected general.type = adapter and adapter.type = lora)")]
    NotAnAdapter(PathBuf),
    #[error("the adapter holds no LoRA tensors")]
    Empty,
    #[error("no adapter named `{0}` is loaded")]
    NotLoaded(String),
    #[error("an adapter named `{0}` is already loaded")]
    AlreadyLoaded(String),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
}
