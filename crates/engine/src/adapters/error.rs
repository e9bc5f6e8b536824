//! [`AdapterError`]: why the engine refused to load or unload an adapter, or to run a request
//! with one. [`AdapterError::kind`] names the class a front end maps to a status.

/// Why an adapter operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    #[error("the LoRA adapter '{0}' has already been loaded")]
    AlreadyLoaded(String),
    #[error("the LoRA adapter '{0}' cannot be found")]
    NotFound(String),
    #[error("cannot load the LoRA adapter '{name}': {reason}")]
    Load { name: String, reason: String },
    #[error("the LoRA adapter '{name}' has rank {rank}, above --max-lora-rank {max}")]
    RankTooLarge {
        name: String,
        rank: usize,
        max: usize,
    },
    #[error("the LoRA adapter '{name}' is in use by {requests} running or waiting request(s); unload it once they finish")]
    InUse { name: String, requests: usize },
    #[error("cannot load the LoRA adapter '{name}': all {max_cpu_loras} resident adapters (--max-cpu-loras) are in use by running or waiting requests")]
    NoFreeSlot { name: String, max_cpu_loras: usize },
    #[error("invalid LoRA limits: {0}")]
    InvalidLimits(String),
    #[error("the engine has stopped")]
    Stopped,
}

/// The class of an [`AdapterError`], for status codes and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterErrorKind {
    /// The request is wrong (duplicate name, unreadable or oversized adapter).
    Invalid,
    /// No adapter of that name.
    NotFound,
    /// The adapter is busy (requests use it).
    Conflict,
    /// The engine cannot take it now (no free resident slot, stopped).
    Unavailable,
}

impl AdapterError {
    pub fn kind(&self) -> AdapterErrorKind {
        match self {
            AdapterError::AlreadyLoaded(_)
            | AdapterError::Load { .. }
            | AdapterError::RankTooLarge { .. }
            | AdapterError::InvalidLimits(_) => AdapterErrorKind::Invalid,
            AdapterError::NotFound(_) => AdapterErrorKind::NotFound,
            AdapterError::InUse { .. } => AdapterErrorKind::Conflict,
            AdapterError::NoFreeSlot { .. } | AdapterError::Stopped => {
                AdapterErrorKind::Unavailable
            }
        }
    }
}
