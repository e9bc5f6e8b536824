//! [`AppState`]: what every route shares: the [`Backend`] requests run on, the tokenizer and chat template,
//! the request [`Limits`] and the metrics handle. Cheap to clone.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kestrel_model::chat_template::ChatTemplate;
use kestrel_model::tokenizer::Tokenizer;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::backend::Backend;

/// Most choices (`n`) one request may ask for.
pub const MAX_N: usize = 16;
/// Most stop strings one request may give.
pub const MAX_STOP_SEQUENCES: usize = 16;
/// Longest stop string, in bytes: the engine checks every stop string after each token, so
/// their length bounds the work one request adds to every step.
pub const MAX_STOP_BYTES: usize = 1024;

/// Per-request length limits and queue policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Longest accepted prompt, in tokens.
    pub max_input_tokens: usize,
    /// Longest prompt + generated tokens.
    pub max_total_tokens: usize,
    /// Abort requests that have not started within this time.
    pub max_queue_time: Option<Duration>,
    /// Most urgent `priority` a client may ask for (lower runs first); default 0.
    pub min_client_priority: i32,
    /// Longest text to template or tokenize, in bytes (prompt, messages, `/tokenize` inputs,
    /// embedding inputs): refused with 413 before any tokenizing.
    pub max_input_bytes: usize,
    /// Events a streaming client may fall behind before its request is aborted
    /// ([`crate::event_buffer`]).
    pub max_buffered_events: usize,
    /// Sampling values for requests that leave them out (`--override-generation-config`).
    pub generation_defaults: crate::generation_defaults::GenerationDefaults,
}

/// Default [`Limits::max_input_bytes`]: 1 MiB (about 250k tokens of English text).
pub const DEFAULT_MAX_INPUT_BYTES: usize = 1 << 20;

impl Limits {
    /// Refuses `len` bytes of `param` beyond [`Limits::max_input_bytes`].
    pub fn check_input_bytes(
        &self,
        param: &'static str,
        len: usize,
    ) -> Result<(), crate::error::ApiError> {
        if len > self.max_input_bytes {
            return Err(crate::error::ApiError::InputTooLarge {
                param,
                len,
                limit: self.max_input_bytes,
            });
        }
        Ok(())
    }
}

/// The model-facing parts of the state.
pub struct ModelInfo {
    /// The name clients see in `/v1/models` and responses.
    pub model_id: String,
    /// Weight type, for `/info` (e.g. `Q4_1`).
    pub dtype: String,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<ChatTemplate>,
    /// How the model writes tool calls (`--tool-call-parser`, else what its chat template
    /// shows); `None`: unknown, so `tool_choice: "auto"` is refused.
    pub tool_call_format: Option<crate::tools::ToolCallFormat>,
    /// How the model marks its reasoning (`--reasoning-parser`, else what its chat template
    /// shows); `None`: replies are not split.
    pub reasoning_parser: Option<crate::reasoning::ReasoningParser>,
}

struct Inner {
    backend: Arc<dyn Backend>,
    model: ModelInfo,
    limits: Limits,
    metrics: PrometheusHandle,
    created: u64,
}

/// Shared state of all routes.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

impl AppState {
    /// State over a started backend. `metrics` comes from [`crate::metrics::install_recorder`],
    /// which must run before an engine starts so its metrics are recorded.
    pub fn new(
        backend: Arc<dyn Backend>,
        model: ModelInfo,
        limits: Limits,
        metrics: PrometheusHandle,
    ) -> AppState {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        AppState {
            inner: Arc::new(Inner {
                backend,
                model,
                limits,
                metrics,
                created,
            }),
        }
    }

    /// Where requests run.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Model name, tokenizer, chat template.
    pub fn model(&self) -> &ModelInfo {
        &self.inner.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.model.tokenizer
    }

    /// Request limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The Prometheus handle `/metrics` renders.
    pub fn metrics(&self) -> &PrometheusHandle {
        &self.inner.metrics
    }

    /// When the server started (Unix seconds), reported as the model's `created`.
    pub fn created(&self) -> u64 {
        self.inner.created
    }
}

/// Seconds since the Unix epoch, for `created` fields.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
