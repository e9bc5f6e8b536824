//! [`EngineBuilder`]: the one place an engine is assembled from a loaded model. `kestrel
//! serve` (through the server's launch), `kestrel generate`, `kestrel chat` and the fleet
//! worker all call it, and multi-model serving calls it once per model at run time, so it
//! reads no process-global state: the thread pool, the KV cache shape and every option come
//! in as values.
//!
//! ```text
//! LoadedModel ─┬─ tokenizer ─► Arc<Tokenizer> (decoder, EOS ids, grammar compiler)
//!              ├─ model + KvSpec + pool ─► ModelRunner (the executor)
//!              └─ SpeculativeOptions (+ draft) ─► Speculator
//!      ─► EngineHandle::try_start_with ─► LoRA adapters registered ─► BuiltEngine
//! ```

mod built_engine;
mod error;
mod kv_disk;
pub mod speculative;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

use kestrel_engine::adapters::AdapterCard;
use kestrel_engine::config::EngineConfig;
use kestrel_engine::constraint::ConstraintFactory;
use kestrel_engine::executor::Executor;
use kestrel_engine::handle::{EngineHandle, EngineOptions, SloAdmission};

pub use built_engine::BuiltEngine;
pub use error::EngineBuildError;
pub use kv_disk::KvDiskOptions;
pub use speculative::{SpecMethod, SpeculativeError, SpeculativeOptions};

use crate::runner::KvSpec;
use crate::tokenizer::Tokenizer;
use crate::{LoadedModel, ModelRunner, ThreadPool};

/// Everything an engine is made of, set step by step; [`EngineBuilder::build`] starts it.
///
/// Off unless set: speculation, LoRA adapters at start, structured output. First-token
/// objectives are enforced at admission unless [`EngineBuilder::slo_admission`] says otherwise
/// (the engine's default).
pub struct EngineBuilder {
    loaded: LoadedModel,
    kv: KvSpec,
    config: EngineConfig,
    pool: &'static ThreadPool,
    speculative: Option<SpeculativeOptions>,
    draft: Option<LoadedModel>,
    lora_modules: Vec<(String, PathBuf)>,
    structured_output: bool,
    slo_admission: SloAdmission,
    kv_disk: Option<KvDiskOptions>,
    metrics_recorder: Option<kestrel_engine::handle::MetricsRecorder>,
}

impl EngineBuilder {
    /// An engine over `loaded` with a KV cache of `kv`, scheduled by `config`, computing on
    /// `pool`.
    pub fn new(
        loaded: LoadedModel,
        kv: KvSpec,
        config: EngineConfig,
        pool: &'static ThreadPool,
    ) -> EngineBuilder {
        EngineBuilder {
            loaded,
            kv,
            config,
            pool,
            speculative: None,
            draft: None,
            lora_modules: Vec::new(),
            structured_output: false,
            slo_admission: SloAdmission::default(),
            kv_disk: None,
            metrics_recorder: None,
        }
    }

    /// Where the engine thread records its metrics (`None`: the process's recorder).
    pub fn metrics_recorder(
        mut self,
        recorder: Option<kestrel_engine::handle::MetricsRecorder>,
    ) -> EngineBuilder {
        self.metrics_recorder = recorder;
        self
    }

    /// A KV disk tier under the prefix cache (`None`: RAM only).
    pub fn kv_disk(mut self, opts: Option<KvDiskOptions>) -> EngineBuilder {
        self.kv_disk = opts;
        self
    }

    /// Speculative decoding with `opts` (`None`: off); `draft` is the draft model the
    /// `draft` method needs, loaded by the caller.
    pub fn speculative(
        mut self,
        opts: Option<SpeculativeOptions>,
        draft: Option<LoadedModel>,
    ) -> EngineBuilder {
        self.speculative = opts;
        self.draft = draft;
        self
    }

    /// LoRA adapters (name, file or directory) registered once the engine runs, in order.
    pub fn lora_modules(mut self, modules: Vec<(String, PathBuf)>) -> EngineBuilder {
        self.lora_modules = modules;
        self
    }

    /// Whether requests may carry a grammar (JSON schema, regex, ...); the model's vocabulary
    /// is compiled for it at build time.
    pub fn structured_output(mut self, on: bool) -> EngineBuilder {
        self.structured_output = on;
        self
    }

    /// What the engine does with first-token objectives it predicts it cannot meet.
    pub fn slo_admission(mut self, admission: SloAdmission) -> EngineBuilder {
        self.slo_admission = admission;
        self
    }

    /// Starts the engine thread and registers the LoRA adapters.
    pub fn build(self) -> Result<BuiltEngine, EngineBuildError> {
        let loaded = self.loaded;
        let tokenizer = Arc::new(loaded.tokenizer);
        let eos = tokenizer.eos_ids().to_vec();
        let kv_bytes_per_token = self.kv.shape(&loaded.model).bytes_per_token();
        if self.kv_disk.is_some() && self.draft.is_some() {
            return Err(EngineBuildError::KvDiskWithDraft);
        }
        let disk_tier = self
            .kv_disk
            .as_ref()
            .map(|opts| {
                let shape = self.kv.shape(&loaded.model);
                kv_disk::open_tier(opts, &loaded.path, &loaded.model, shape)
            })
            .transpose()?;
        let speculator = self
            .speculative
            .as_ref()
            .map(|s| speculative::speculator(s, &tokenizer, self.draft, self.kv, self.pool))
            .transpose()?;
        let runner = ModelRunner::with_kv(loaded.model, self.kv, self.pool);
        let constraints = self
            .structured_output
            .then(|| constraint_factory(&tokenizer, runner.vocab_size()))
            .flatten();
        let options = EngineOptions {
            speculator,
            constraints,
            slo_admission: self.slo_admission,
            disk_tier,
            metrics_recorder: self.metrics_recorder,
        };
        let engine = EngineHandle::try_start_with(
            Box::new(runner),
            tokenizer.clone(),
            eos,
            self.config,
            options,
        )?;
        let adapters = load_adapters(&engine, self.lora_modules)?;
        Ok(BuiltEngine {
            engine,
            tokenizer,
            kv: self.kv,
            kv_bytes_per_token,
            adapters,
            path: loaded.path,
            config: loaded.config,
            chat_template: loaded.chat_template,
        })
    }
}

/// Registers each adapter, validating it now (beyond the engine's CPU limit the least
/// recently loaded ones are evicted and loaded again when a request needs them).
fn load_adapters(
    engine: &EngineHandle,
    modules: Vec<(String, PathBuf)>,
) -> Result<Vec<AdapterCard>, EngineBuildError> {
    modules
        .into_iter()
        .map(|(name, path)| {
            engine
                .load_adapter(&name, path.clone())
                .map_err(|source| EngineBuildError::Lora { name, path, source })
        })
        .collect()
}

/// The grammar compiler for a model whose logits are `logits_width` wide; `None`, with a
/// warning, if its vocabulary cannot be turned into one (requests with a grammar are then
/// refused). The fleet gateway, which validates grammars without an engine, uses it too.
pub fn constraint_factory(
    tokenizer: &Tokenizer,
    logits_width: usize,
) -> Option<Arc<ConstraintFactory>> {
    match tokenizer.constraint_factory(logits_width) {
        Ok(factory) => Some(factory),
        Err(e) => {
            tracing::warn!(error = %e, "structured output is disabled");
            None
        }
    }
}
