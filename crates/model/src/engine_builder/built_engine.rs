//! [`BuiltEngine`]: a running engine and what its callers need to know of the model behind
//! it (the parts of the [`crate::LoadedModel`] the engine did not take).

use std::path::PathBuf;
use std::sync::Arc;

use kestrel_engine::adapters::AdapterCard;
use kestrel_engine::handle::EngineHandle;

use crate::chat_template::ChatTemplate;
use crate::config::ModelConfig;
use crate::runner::KvSpec;
use crate::tokenizer::Tokenizer;

/// What [`super::EngineBuilder::build`] returns.
pub struct BuiltEngine {
    /// The handle to the engine thread.
    pub engine: EngineHandle,
    /// The model's tokenizer, shared with the engine's detokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The KV cache the engine runs with.
    pub kv: KvSpec,
    /// Bytes one token takes in the KV cache over every layer (K and V).
    pub kv_bytes_per_token: usize,
    /// The LoRA adapters registered at start, in the order given.
    pub adapters: Vec<AdapterCard>,
    /// The weights file or checkpoint directory the model was loaded from.
    pub path: PathBuf,
    /// The model's configuration.
    pub config: ModelConfig,
    /// The model's chat template, if it has one.
    pub chat_template: Option<ChatTemplate>,
}
