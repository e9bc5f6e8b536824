//! [`EngineBuildError`]: why [`super::EngineBuilder::build`] could not start an engine.

use std::path::PathBuf;

use kestrel_engine::adapters::AdapterError;
use kestrel_engine::handle::EngineStartError;
use kestrel_engine::kv::disk_tier::DiskTierError;

use super::speculative::SpeculativeError;

/// Why an engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineBuildError {
    /// The speculative-decoding settings or the draft model do not fit.
    #[error(transparent)]
    Speculative(#[from] SpeculativeError),
    /// The engine refused its configuration or its thread could not be spawned.
    #[error("cannot start the engine: {0}")]
    Start(#[from] EngineStartError),
    /// A LoRA adapter given at start could not be loaded (the engine is stopped).
    #[error("LoRA adapter {name} ({}): {source}", path.display())]
    Lora {
        name: String,
        path: PathBuf,
        source: AdapterError,
    },
    /// The KV disk tier's directory cannot be opened.
    #[error(transparent)]
    KvDisk(#[from] DiskTierError),
    /// The model's files cannot be read to fingerprint the KV disk tier.
    #[error("cannot read {} to fingerprint the KV disk tier: {source}", path.display())]
    ModelIdentity {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A draft model keeps KV of its own, which the disk tier does not keep.
    #[error("the KV disk tier cannot be combined with a draft model (speculative decoding with `draft`)")]
    KvDiskWithDraft,
}
