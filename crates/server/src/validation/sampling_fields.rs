//! The sampling and scheduling fields of a request: each checked against its range in
//! [`super::param_ranges`] (the table `/openapi.json` publishes), with a 400 naming the field.

use std::collections::HashMap;

use kestrel_engine::logit_bias::LogitBias;
use kestrel_engine::sampling::SamplingParams;

use crate::error::ApiError;
use crate::openai::wire::SamplingFields;
use crate::state::{AppState, Limits, MAX_STOP_BYTES, MAX_STOP_SEQUENCES};
use crate::validation::param_ranges::{self as ranges, Range};
use crate::wire::StopSequences;

/// vLLM's `prompt_logprobs`: 0..=20 alternatives, not with `stream` (as vLLM refuses it).
pub(super) fn prompt_logprobs(
    requested: Option<i64>,
    stream: bool,
) -> Result<Option<usize>, ApiError> {
    let Some(n) = requested else { return Ok(None) };
    if stream {
        return Err(ApiError::param(
            "prompt_logprobs",
            "prompt_logprobs is not available with stream",
        ));
    }
    Ok(Some(
        bounded("prompt_logprobs", n, ranges::LOGPROBS)? as usize
    ))
}

/// `n`: choices per prompt.
pub(super) fn choices_n(n: Option<i64>) -> Result<usize, ApiError> {
    Ok(bounded("n", n.unwrap_or(1), ranges::N)? as usize)
}

/// `best_of`: candidates per prompt, at least `n`, not with `stream` (OpenAI's rules).
pub(super) fn best_of(best_of: Option<i64>, n: usize, stream: bool) -> Result<usize, ApiError> {
    let Some(b) = best_of else { return Ok(n) };
    let b = bounded("best_of", b, ranges::BEST_OF)? as usize;
    if b < n {
        return Err(ApiError::param(
            "best_of",
            format!("best_of ({b}) must be at least n ({n})"),
        ));
    }
    if stream && b > n {
        return Err(ApiError::param(
            "best_of",
            "best_of cannot be used with stream (candidates are ranked once all finished)",
        ));
    }
    Ok(b)
}

/// A request's scheduling and cache settings (priority, prefix-cache salt).
#[derive(Debug, Clone)]
pub(super) struct Scheduling {
    pub(super) priority: i32,
    pub(super) cache_salt: Option<String>,
    pub(super) ttft_slo: Option<std::time::Duration>,
}

/// The shared OpenAI sampling fields (`max_tokens` left at its default) and the scheduling
/// settings.
pub(super) fn openai_sampling(
    state: &AppState,
    f: SamplingFields,
    logprobs: Option<usize>,
) -> Result<(SamplingParams, Scheduling), ApiError> {
    let f = state.limits().generation_defaults.fill(f);
    let temperature = match f.temperature {
        Some(t) if !ranges::TEMPERATURE.contains(t) => {
            return Err(ApiError::param(
                "temperature",
                format!("temperature must be {}, got {t}", ranges::TEMPERATURE),
            ))
        }
        Some(t) => t as f32,
        None => 1.0,
    };
    let vocab = state.backend().request_limits().vocab_size;
    let filters = Filters {
        top_k: f.top_k,
        top_p: f.top_p,
        min_p: f.min_p,
        repetition_penalty: f.repetition_penalty,
        frequency_penalty: f.frequency_penalty,
        presence_penalty: f.presence_penalty,
    };
    let sampling = SamplingParams {
        temperature,
        seed: f.seed.map(|s| s as u64),
        stop_token_ids: stop_token_ids(f.stop_token_ids, vocab)?,
        stop: stops(f.stop)?,
        ignore_eos: f.ignore_eos.unwrap_or(false),
        logprobs,
        logit_bias: logit_bias(f.logit_bias)?,
        min_tokens: match f.min_tokens {
            None => 0,
            Some(m) => bounded("min_tokens", m, ranges::MIN_TOKENS)? as usize,
        },
        include_stop_str_in_output: f.include_stop_str_in_output.unwrap_or(false),
        skip_special_tokens: f.skip_special_tokens.unwrap_or(true),
        ..with_filters(filters)?
    };
    let sched = Scheduling {
        priority: priority(state, f.priority)?,
        cache_salt: f.cache_salt,
        ttft_slo: crate::validation::ttft_slo::from_field(f.ttft_slo_ms)?,
    };
    Ok((sampling, sched))
}

/// The truncation filters and penalties both APIs take, as sent.
pub(super) struct Filters {
    pub top_k: Option<i64>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
}

/// Default sampling parameters with `f`'s filters and penalties, each checked against its
/// range (absent ones keep their neutral value).
pub(super) fn with_filters(f: Filters) -> Result<SamplingParams, ApiError> {
    Ok(SamplingParams {
        top_k: top_k(f.top_k)?,
        top_p: ranged("top_p", f.top_p, ranges::TOP_P, 1.0)?,
        min_p: ranged("min_p", f.min_p, ranges::MIN_P, 0.0)?,
        repetition_penalty: ranged(
            "repetition_penalty",
            f.repetition_penalty,
            ranges::REPETITION_PENALTY,
            1.0,
        )?,
        frequency_penalty: ranged(
            "frequency_penalty",
            f.frequency_penalty,
            ranges::PENALTY,
            0.0,
        )?,
        presence_penalty: ranged("presence_penalty", f.presence_penalty, ranges::PENALTY, 0.0)?,
        ..SamplingParams::default()
    })
}

/// `logit_bias`: token ids as strings; the engine checks the ranges and the vocabulary.
pub(super) fn logit_bias(bias: Option<HashMap<String, f64>>) -> Result<LogitBias, ApiError> {
    let mut entries = bias
        .unwrap_or_default()
        .into_iter()
        .map(|(key, b)| match key.trim().parse::<u32>() {
            Ok(id) => Ok((id, b as f32)),
            Err(_) => Err(ApiError::param(
                "logit_bias",
                format!("logit_bias keys must be token ids, got {key:?}"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|&(id, _)| id);
    Ok(LogitBias::new(entries))
}

pub(super) fn stop_token_ids(ids: Option<Vec<i64>>, vocab: usize) -> Result<Vec<u32>, ApiError> {
    ids.unwrap_or_default()
        .into_iter()
        .map(|id| {
            let range = Range {
                max: Some(vocab as f64 - 1.0),
                ..ranges::TOKEN_ID
            };
            Ok(bounded("stop_token_ids", id, range)? as u32)
        })
        .collect()
}

/// `priority`: lower runs first (vLLM's convention), default 0. Values below the server's
/// `--min-client-priority` (default 0: clients may only lower their own urgency) are refused.
pub(super) fn priority(state: &AppState, priority: Option<i64>) -> Result<i32, ApiError> {
    let Some(p) = priority else { return Ok(0) };
    let min = state.limits().min_client_priority;
    if !ranges::priority(min).contains_int(p) {
        return Err(ApiError::param(
            "priority",
            format!("priority must be between {min} and {}, got {p}", i32::MAX),
        ));
    }
    Ok(p as i32)
}

/// Checks the prompt against the limits and resolves `max_tokens`: an explicit value must fit;
/// the default is clamped to what fits.
pub(super) fn max_tokens(
    limits: &Limits,
    prompt_len: usize,
    requested: Option<i64>,
    param: &'static str,
    default: usize,
) -> Result<usize, ApiError> {
    if prompt_len > limits.max_input_tokens {
        return Err(ApiError::TooLong(format!(
            "the prompt has {prompt_len} tokens, more than the limit of {} input tokens \
             (max total tokens {})",
            limits.max_input_tokens, limits.max_total_tokens
        )));
    }
    let room = limits.max_total_tokens.saturating_sub(prompt_len);
    let Some(requested) = requested else {
        let cap = limits
            .generation_defaults
            .max_new_tokens
            .unwrap_or(usize::MAX);
        return Ok(default.min(cap).min(room).max(1));
    };
    if !ranges::MAX_TOKENS.contains_int(requested) {
        return Err(ApiError::param(
            param,
            format!("{param} must be at least 1, got {requested}"),
        ));
    }
    let wanted = requested as u64;
    if prompt_len as u64 + wanted > limits.max_total_tokens as u64 {
        return Err(ApiError::TooLong(format!(
            "the prompt ({prompt_len} tokens) plus {param} ({requested}) exceeds the limit of {} \
             total tokens (at most {room} new tokens fit)",
            limits.max_total_tokens
        )));
    }
    Ok(wanted as usize)
}

/// `v` if it is in `range`, else a 400 naming `param`.
pub(super) fn bounded(param: &'static str, v: i64, range: Range) -> Result<i64, ApiError> {
    if range.contains_int(v) {
        Ok(v)
    } else {
        Err(ApiError::param(
            param,
            format!("{param} must be {range}, got {v}"),
        ))
    }
}

pub(super) fn top_k(v: Option<i64>) -> Result<Option<usize>, ApiError> {
    match v {
        None | Some(-1) | Some(0) => Ok(None),
        Some(k) if ranges::TOP_K.contains_int(k) => Ok(Some(k as usize)),
        Some(k) => Err(ApiError::param(
            "top_k",
            format!("top_k must be positive (or -1/0 to disable), got {k}"),
        )),
    }
}

/// A float parameter: `default` when absent, else a value in `range`.
pub(super) fn ranged(
    param: &'static str,
    v: Option<f64>,
    range: Range,
    default: f32,
) -> Result<f32, ApiError> {
    match v {
        None => Ok(default),
        Some(p) if range.contains(p) => Ok(p as f32),
        Some(p) => Err(ApiError::param(
            param,
            format!("{param} must be {range}, got {p}"),
        )),
    }
}

pub(super) fn stops(v: Option<StopSequences>) -> Result<Vec<String>, ApiError> {
    let stops = v.map(StopSequences::into_vec).unwrap_or_default();
    if stops.len() > MAX_STOP_SEQUENCES {
        return Err(ApiError::param(
            "stop",
            format!(
                "at most {MAX_STOP_SEQUENCES} stop sequences are allowed, got {}",
                stops.len()
            ),
        ));
    }
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::param("stop", "stop sequences must not be empty"));
    }
    if let Some(long) = stops.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::param(
            "stop",
            format!(
                "stop sequences may be at most {MAX_STOP_BYTES} bytes long, got one of {} bytes",
                long.len()
            ),
        ));
    }
    Ok(stops)
}
