//! [`EngineBuildError`]: why [`super::EngineBuilder::build`] could not start an engine.

use std::path::PathBuf;

use kestrel_engine::adapters::AdapterError;
use kestrel_engine::handle::EngineStartError;

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
}
