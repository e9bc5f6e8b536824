//! From a loaded model to a ready [`AppState`]: size the KV cache (the model crate's
//! [`KvSpec::for_budget`] turns the budget into blocks), derive the length limits, install the
//! metrics recorder, start the engine (through the model crate's [`EngineBuilder`]). Used by
//! `kestrel serve`, `kestrel chat`, the fleet worker and the HTTP tests.
//!
//! ```text
//! model len   = min(model context, kv blocks × block_size)
//! total limit = --max-total-tokens or model len    (≤ model len)
//! input limit = --max-input-tokens or total - 1    (< total)
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kestrel_engine::adapters::{AdapterError, LoraLimits};
use kestrel_engine::config::EngineConfig;
use kestrel_engine::handle::{EngineHandle, SloAdmission};
use kestrel_engine::kv::AttentionWindow;
use kestrel_model::engine_builder::{
    EngineBuildError, EngineBuilder, KvDiskOptions, SpeculativeError, SpeculativeOptions,
};
pub use kestrel_model::runner::KvBudget;
use kestrel_model::runner::{KvSizeError, KvSpec};
use kestrel_model::{KvDtype, LoadedModel, ThreadPool};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::state::{AppState, Limits, ModelInfo};

/// Engine and limit settings for [`start`].
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub block_size: usize,
    pub kv_cache: KvBudget,
    /// How the KV cache stores K and V (`--kv-cache-dtype`).
    pub kv_dtype: KvDtype,
    pub enable_prefix_caching: bool,
    pub max_concurrent_requests: Option<usize>,
    pub max_input_tokens: Option<usize>,
    pub max_total_tokens: Option<usize>,
    pub max_queue_time: Option<Duration>,
    /// Most urgent `priority` a client may ask for (`--min-client-priority`; lower runs first).
    pub min_client_priority: i32,
    /// Longest text to template or tokenize, in bytes (`--max-input-bytes`).
    pub max_input_bytes: usize,
    /// Events a streaming client may fall behind (`--max-buffered-events`).
    pub max_buffered_events: usize,
    /// The name clients see; defaults to the model file's stem.
    pub model_id: Option<String>,
    /// LoRA adapters to load at start (`--lora-modules name=path`), in order.
    pub lora_modules: Vec<(String, PathBuf)>,
    /// `--max-loras`, `--max-lora-rank`, `--max-cpu-loras`.
    pub lora_limits: LoraLimits,
    /// Speculative decoding (`--speculative-method`); `None`: off.
    pub speculative: Option<SpeculativeOptions>,
    /// The model's tool-call format (`--tool-call-parser`); `None`: read from its chat
    /// template.
    pub tool_call_parser: Option<crate::tools::ToolCallFormat>,
    /// `--reasoning-parser`: `None` reads it off the chat template; `Some(None)` (`none`)
    /// turns splitting off.
    pub reasoning_parser: Option<Option<crate::reasoning::ReasoningParser>>,
    /// Refuse (429) requests whose `ttft_slo_ms` the engine predicts it cannot meet; off
    /// (`--no-slo-admission`), objectives are only counted met or missed.
    pub slo_admission: bool,
    /// The KV disk tier under the prefix cache (`--kv-cache-disk`); `None`: RAM only.
    pub kv_disk: Option<KvDiskOptions>,
    /// Sampling values for requests that leave them out (`--override-generation-config`).
    pub generation_defaults: crate::generation_defaults::GenerationDefaults,
    /// Label the engine's metrics with `model_name` (a process of several engines).
    pub label_metrics: bool,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions {
            max_num_seqs: 64,
            max_num_batched_tokens: 512,
            block_size: 16,
            kv_cache: KvBudget::Bytes(1 << 30),
            kv_dtype: KvDtype::F16,
            enable_prefix_caching: true,
            max_concurrent_requests: Some(256),
            max_input_tokens: None,
            max_total_tokens: None,
            max_queue_time: None,
            min_client_priority: 0,
            max_input_bytes: crate::state::DEFAULT_MAX_INPUT_BYTES,
            max_buffered_events: crate::event_buffer::DEFAULT_MAX_BUFFERED_EVENTS,
            model_id: None,
            lora_modules: Vec::new(),
            lora_limits: LoraLimits::default(),
            speculative: None,
            tool_call_parser: None,
            reasoning_parser: None,
            slo_admission: true,
            kv_disk: None,
            generation_defaults: Default::default(),
            label_metrics: false,
        }
    }
}

/// Why the server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    KvSize(#[from] KvSizeError),
    #[error("{0}")]
    Limits(String),
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    #[error("cannot start the engine: {0}")]
    Engine(#[from] kestrel_engine::handle::EngineStartError),
    #[error(transparent)]
    Speculative(#[from] SpeculativeError),
    #[error("--lora-modules {name}={path}: {source}")]
    Lora {
        name: String,
        path: PathBuf,
        source: AdapterError,
    },
    /// The KV disk tier could not be opened (`--kv-cache-disk`).
    #[error("--kv-cache-disk: {0}")]
    KvDisk(EngineBuildError),
}

/// The build error in the server's words (`--lora-modules` names the flag at fault).
impl From<EngineBuildError> for LaunchError {
    fn from(e: EngineBuildError) -> Self {
        match e {
            EngineBuildError::Speculative(e) => LaunchError::Speculative(e),
            EngineBuildError::Start(e) => LaunchError::Engine(e),
            EngineBuildError::Lora { name, path, source } => {
                LaunchError::Lora { name, path, source }
            }
            e @ (EngineBuildError::KvDisk(_)
            | EngineBuildError::ModelIdentity { .. }
            | EngineBuildError::KvDiskWithDraft) => LaunchError::KvDisk(e),
        }
    }
}

/// A started engine with what the routes need to know of its model.
pub struct Launched {
    pub engine: EngineHandle,
    pub model: ModelInfo,
    pub limits: Limits,
    pub metrics: PrometheusHandle,
    /// How large the KV cache came out (for the startup summary).
    pub kv_cache: KvCacheSize,
    /// The weights file or checkpoint directory the model was loaded from.
    pub weights: PathBuf,
}

/// The KV cache the budget bought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheSize {
    pub num_blocks: usize,
    pub block_size: usize,
    pub dtype: KvDtype,
    /// Bytes one token takes over every layer (K and V).
    pub bytes_per_token: usize,
}

impl KvCacheSize {
    /// Tokens the cache holds.
    pub fn tokens(&self) -> usize {
        self.num_blocks * self.block_size
    }

    /// Bytes the cache takes.
    pub fn bytes(&self) -> usize {
        self.tokens() * self.bytes_per_token
    }
}

impl Launched {
    /// The routes' state over this engine.
    pub fn into_state(self) -> AppState {
        AppState::new(Arc::new(self.engine), self.model, self.limits, self.metrics)
    }
}

/// Starts the engine over `loaded` and returns the server state.
pub fn start(
    loaded: LoadedModel,
    opts: &LaunchOptions,
    pool: &'static ThreadPool,
) -> Result<AppState, LaunchError> {
    start_engine(loaded, opts, pool).map(Launched::into_state)
}

/// Starts the engine over `loaded` (sizing its KV cache and limits from `opts`).
pub fn start_engine(
    loaded: LoadedModel,
    opts: &LaunchOptions,
    pool: &'static ThreadPool,
) -> Result<Launched, LaunchError> {
    start_engine_with_draft(loaded, None, opts, pool)
}

/// [`start_engine`] with the draft model that `opts.speculative` names, loaded by the caller
/// (`None` unless the method is `draft`).
pub fn start_engine_with_draft(
    loaded: LoadedModel,
    draft: Option<LoadedModel>,
    opts: &LaunchOptions,
    pool: &'static ThreadPool,
) -> Result<Launched, LaunchError> {
    let metrics = crate::metrics::install_recorder()?;
    let kv = KvSpec::for_budget(&loaded.model, opts.block_size, opts.kv_dtype, opts.kv_cache)?;
    let model_len = context_limit(
        loaded.config.max_position_embeddings,
        loaded.model.attention_window(),
        &kv,
    );
    let limits = limits(opts, model_len)?;
    opts.lora_limits
        .validate()
        .map_err(|e| LaunchError::Limits(e.to_string()))?;
    let config = EngineConfig {
        max_num_seqs: opts.max_num_seqs,
        max_num_batched_tokens: opts.max_num_batched_tokens,
        enable_prefix_caching: opts.enable_prefix_caching,
        max_model_len: limits.max_total_tokens,
        max_concurrent_requests: opts.max_concurrent_requests,
        lora: opts.lora_limits,
    };
    let model_id = opts.model_id.clone().unwrap_or_else(|| {
        loaded
            .path
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
    });
    let built = EngineBuilder::new(loaded, kv, config, pool)
        .speculative(opts.speculative.clone(), draft)
        .lora_modules(opts.lora_modules.clone())
        .structured_output(true)
        .kv_disk(opts.kv_disk.clone())
        .metrics_recorder(
            opts.label_metrics
                .then(|| crate::metrics::labelled_recorder(&model_id))
                .flatten(),
        )
        .slo_admission(if opts.slo_admission {
            SloAdmission::Enforce
        } else {
            SloAdmission::Off
        })
        .build()?;
    for card in &built.adapters {
        tracing::info!(adapter = %card.name, path = %card.path.display(), rank = card.rank, "LoRA adapter loaded");
    }
    let kv_cache = KvCacheSize {
        num_blocks: kv.num_blocks,
        block_size: kv.block_size,
        dtype: kv.dtype,
        bytes_per_token: built.kv_bytes_per_token,
    };
    tracing::info!(
        num_blocks = kv.num_blocks,
        block_size = kv.block_size,
        kv_dtype = %kv.dtype,
        kv_bytes_per_token = built.kv_bytes_per_token,
        max_input_tokens = limits.max_input_tokens,
        max_total_tokens = limits.max_total_tokens,
        "engine started"
    );
    let model = ModelInfo {
        model_id,
        dtype: built
            .config
            .dtype
            .clone()
            .unwrap_or_else(|| "unknown".into()),
        tokenizer: built.tokenizer,
        tool_call_format: opts.tool_call_parser.or_else(|| {
            let template = built.chat_template.as_ref()?;
            crate::tools::ToolCallFormat::detect(template.source())
        }),
        reasoning_parser: opts.reasoning_parser.unwrap_or_else(|| {
            let template = built.chat_template.as_ref()?;
            crate::reasoning::ReasoningParser::detect(template.source())
        }),
        chat_template: built.chat_template,
    };
    crate::otel::spawn_step_spans(&built.engine);
    Ok(Launched {
        engine: built.engine,
        model,
        limits,
        metrics,
        kv_cache,
        weights: built.path,
    })
}

/// The longest context the engine can run: the model's, capped by the KV pool unless `window`
/// (the window bounding every layer) fits the pool, in which case the engine releases blocks
/// outside it and a sequence's blocks stay bounded whatever its length.
fn context_limit(max_positions: usize, window: Option<usize>, kv: &KvSpec) -> usize {
    let window_bounded = window
        .and_then(|w| AttentionWindow::new(w, kv.block_size))
        .and_then(|w| w.max_chunk(kv.num_blocks))
        .is_some();
    if window_bounded {
        max_positions
    } else {
        max_positions.min(kv.num_blocks * kv.block_size)
    }
}

fn limits(opts: &LaunchOptions, model_len: usize) -> Result<Limits, LaunchError> {
    let total = opts.max_total_tokens.unwrap_or(model_len);
    if total > model_len || total < 2 {
        return Err(LaunchError::Limits(format!(
            "--max-total-tokens must be between 2 and {model_len} (the model's context, capped by the KV cache unless a sliding window on every layer bounds it), got {total}"
        )));
    }
    let input = opts.max_input_tokens.unwrap_or(total - 1);
    if input == 0 || input >= total {
        return Err(LaunchError::Limits(format!(
            "--max-input-tokens must be between 1 and {} (below --max-total-tokens {total}), got {input}",
            total - 1
        )));
    }
    Ok(Limits {
        max_input_tokens: input,
        max_total_tokens: total,
        max_queue_time: opts.max_queue_time,
        min_client_priority: opts.min_client_priority,
        max_input_bytes: opts.max_input_bytes,
        max_buffered_events: opts.max_buffered_events,
        generation_defaults: opts.generation_defaults,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_the_pool_holds_lifts_the_pool_cap() {
        let kv = KvSpec {
            block_size: 16,
            num_blocks: 64,
            dtype: KvDtype::F32,
        };
        assert_eq!(context_limit(32_768, None, &kv), 1024);
        assert_eq!(context_limit(32_768, Some(512), &kv), 32_768);
        assert_eq!(context_limit(600, Some(512), &kv), 600);
        // A window wider than the pool can hold does not bound a sequence's blocks.
        assert_eq!(context_limit(32_768, Some(4096), &kv), 1024);
    }
}
