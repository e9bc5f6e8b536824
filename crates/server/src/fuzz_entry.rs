//! Entry points for the request fuzz target in `fuzz/` and for the test that replays its
//! corpus: a request body goes through exactly what a route does before it reaches a backend
//! ([`crate::extract::parse_body`], then [`crate::validation`]), for each of
//! `/v1/completions`, `/v1/chat/completions` and `/generate`, against an [`AppState`] whose
//! backend refuses every submission. Every input must come back as `Ok` or an [`ApiError`]: a
//! panic, a hang or a huge allocation is a bug in the server, not in the caller.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kestrel_engine::api::{EngineRequest, EngineStats, RequestLimits};
use kestrel_model::tokenizer::Tokenizer;
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::backend::{Backend, BackendHealth, Capacity, EventStream};
use crate::error::ApiError;
use crate::extract::{parse_body, ApiPolicy};
use crate::openai::wire::{ChatCompletionRequest, CompletionRequest};
use crate::state::{AppState, Limits, ModelInfo, DEFAULT_MAX_INPUT_BYTES};
use crate::tgi::wire::GenerateRequest;
use crate::tools::ToolCallFormat;
use crate::validation::{chat, completion, generate};

/// The context length the fuzzing state's backend reports.
const MAX_MODEL_LEN: usize = 4096;

/// Why the fuzzing state could not be built (its tokenizer or template is bad).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the fuzzing state: {0}")]
pub struct FuzzStateError(String);

/// A backend with the given vocabulary that refuses every submission (validation never
/// submits; nothing here runs a model).
struct RefusingBackend {
    vocab_size: usize,
}

impl Backend for RefusingBackend {
    fn submit(&self, _req: EngineRequest) -> Result<EventStream, ApiError> {
        Err(ApiError::Unavailable(
            "no engine behind the fuzzing state".into(),
        ))
    }

    fn request_limits(&self) -> RequestLimits {
        RequestLimits {
            vocab_size: self.vocab_size,
            max_model_len: MAX_MODEL_LEN,
        }
    }

    fn capacity(&self) -> Capacity {
        Capacity {
            max_concurrent_requests: None,
            max_num_batched_tokens: MAX_MODEL_LEN,
            max_num_seqs: 1,
            block_size: 16,
            num_kv_blocks: MAX_MODEL_LEN / 16,
        }
    }

    fn engine_stats(&self) -> Option<EngineStats> {
        None
    }

    fn health(&self) -> BackendHealth {
        BackendHealth {
            ready: false,
            running: 0,
            waiting: 0,
            kv_usage: 0.0,
        }
    }

    fn shutdown(&self, _deadline: Duration) {}

    fn load_adapter(
        &self,
        name: &str,
        _path: PathBuf,
    ) -> Result<kestrel_engine::adapters::AdapterCard, ApiError> {
        Err(ApiError::Invalid(format!("no adapters here ({name})")))
    }
}

/// A state over a HF `tokenizer.json` and `tokenizer_config.json` (BOS/EOS and the chat
/// template), with the default limits of `kestrel serve` and a context of
/// [`MAX_MODEL_LEN`] tokens.
pub fn fuzz_state(
    tokenizer_json: &str,
    tokenizer_config: &str,
) -> Result<AppState, FuzzStateError> {
    let err = |e: &dyn std::fmt::Display| FuzzStateError(e.to_string());
    let tokenizer =
        Tokenizer::from_json_text(tokenizer_json, Some(tokenizer_config)).map_err(|e| err(&e))?;
    let chat_template = kestrel_model::loader::template(&tokenizer).map_err(|e| err(&e))?;
    let tool_call_format = tokenizer.chat_template().and_then(ToolCallFormat::detect);
    let reasoning_parser = tokenizer
        .chat_template()
        .and_then(crate::reasoning::ReasoningParser::detect);
    let backend = RefusingBackend {
        vocab_size: tokenizer.vocab_size(),
    };
    let model = ModelInfo {
        model_id: "fuzz".into(),
        dtype: "F32".into(),
        tokenizer: Arc::new(tokenizer),
        chat_template,
        tool_call_format,
        reasoning_parser,
    };
    let limits = Limits {
        max_input_tokens: MAX_MODEL_LEN - 1,
        max_total_tokens: MAX_MODEL_LEN,
        max_queue_time: None,
        min_client_priority: 0,
        max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
        max_buffered_events: 1024,
        generation_defaults: Default::default(),
    };
    let metrics = PrometheusBuilder::new().build_recorder().handle();
    Ok(AppState::new(Arc::new(backend), model, limits, metrics))
}

/// What each route made of one body.
#[derive(Debug)]
pub struct RequestOutcome {
    pub completion: Result<(), ApiError>,
    pub chat: Result<(), ApiError>,
    pub generate: Result<(), ApiError>,
}

/// `data` as the body of `/v1/completions`, `/v1/chat/completions` and `/generate`: parsed
/// (with the strict unknown-field policy when the body's first byte is odd, so both policies
/// are covered) and validated.
pub fn request(state: &AppState, data: &[u8]) -> RequestOutcome {
    let policy = ApiPolicy {
        strict: data.first().is_some_and(|b| b % 2 == 1),
    };
    let now = Instant::now();
    RequestOutcome {
        completion: parse_body::<CompletionRequest>(data, policy)
            .and_then(|req| completion(state, req, now))
            .map(drop),
        chat: parse_body::<ChatCompletionRequest>(data, policy)
            .and_then(|req| chat(state, req, now))
            .map(drop),
        generate: parse_body::<GenerateRequest>(data, policy)
            .and_then(|req| generate(state, req, now))
            .map(drop),
    }
}
