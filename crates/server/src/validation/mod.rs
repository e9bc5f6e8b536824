//! Wire request -> validated [`EngineRequest`], in one place.
//!
//! Every route hands its parsed body to one function here ([`completion`], [`chat`],
//! [`generate`]); what comes back is ready for `EngineHandle::submit`, or an [`ApiError`] that
//! names the offending parameter. The steps are the same for all three APIs:
//!
//! ```text
//! wire body ─► reject unsupported features ─► prompt ids (template + tokenize)
//!           ─► sampling parameters (ranges) ─► server length limits (prompt, prompt + max_tokens)
//!           ─► EngineRequest::new (the engine's one check: prompt ids in the vocabulary,
//!              SamplingParams::validate, prompt + max_tokens within the engine's context)
//! ```
//!
//! Routes call [`validate_off_thread`], which runs the wire type's [`Validate`] on the blocking
//! pool: templating and tokenizing are CPU work proportional to the prompt.
//!
//! Every check of every API family lives in this folder: [`param_ranges`] (the ranges, also
//! published in `/openapi.json`), `sampling_fields` and `prompt_ids` (the steps above),
//! [`ttft_slo`] (first-token objectives, field or header), [`structured`] and [`constraint`]
//! (structured output: wire fields -> grammar -> compiled against the model), [`chat_tools`]
//! (`tools` and `tool_choice`), [`responses`] (OpenAI Responses: input items -> a
//! [`ChatCall`]). A new family adds its `Validate` impl here.

pub mod chat_call;
pub mod chat_tools;
pub mod constraint;
pub mod param_ranges;
mod prompt_ids;
pub mod responses;
mod sampling_fields;
pub mod structured;
pub mod ttft_slo;

use std::time::Instant;

use kestrel_engine::adapter_id::AdapterId;
use kestrel_engine::api::EngineRequest;
use kestrel_engine::sampling::SamplingParams;

use kestrel_engine::adapters::AdapterError;

use crate::blocking;
use crate::error::ApiError;
use crate::openai::wire::{ChatCompletionRequest, CompletionRequest};
use crate::state::AppState;
use crate::tgi::wire::GenerateRequest;
use chat_call::{ChatCall, MaxTokens};
use chat_tools::AutoWithoutFormat;
use param_ranges as ranges;
use prompt_ids::{completion_prompts, encode};
use sampling_fields::{
    best_of, bounded, choices_n, max_tokens, openai_sampling, priority, prompt_logprobs, stops,
    with_filters, Filters, Scheduling,
};

/// Default `max_tokens` of `/v1/completions` (OpenAI's).
const COMPLETION_DEFAULT_MAX_TOKENS: usize = 16;
/// Default `max_new_tokens` of TGI routes.
const TGI_DEFAULT_MAX_NEW_TOKENS: usize = 100;

/// Most engine requests (prompts × `best_of`) one OpenAI request may start.
pub const MAX_CANDIDATES: usize = 64;

/// One prompt of a validated OpenAI request.
#[derive(Debug, Clone)]
pub struct ValidPrompt {
    /// The request of its first candidate; candidate `i` differs only in its seed (`seed + i`).
    pub request: EngineRequest,
    /// The prompt's text, prepended to every choice (`echo`).
    pub echo: Option<String>,
}

/// A validated OpenAI request.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    /// One entry per prompt (completions take a list; chat has one).
    pub prompts: Vec<ValidPrompt>,
    /// Choices returned per prompt.
    pub n: usize,
    /// Candidates generated per prompt (`best_of`, at least `n`); the `n` with the highest
    /// cumulative log-probability are returned.
    pub best_of: usize,
    pub stream: bool,
    /// Send a final usage chunk when streaming.
    pub include_usage: bool,
    /// The client asked for logprobs (they may also be computed to rank `best_of`).
    pub logprobs: bool,
    /// The LoRA adapter `model` named (echoed as the response's `model`); `None`: the base.
    pub adapter: Option<String>,
    /// How a chat reply is read for tool calls; `None`: plain text.
    pub tools: Option<crate::validation::chat_tools::ToolMode>,
    /// vLLM's `prompt_logprobs`: alternatives per prompt position; `None`: not asked for.
    pub prompt_logprobs: Option<usize>,
    /// Where a chat reply starts, when the model's reasoning is split from its answer;
    /// `None`: not split.
    pub reasoning: Option<crate::reasoning::ReasoningMode>,
}

impl ValidRequest {
    /// Every engine request, prompt by prompt, `best_of` candidates each: distinct seeds keep
    /// sampled candidates distinct. Candidate `j` of prompt `p` is at `p * best_of + j`.
    pub fn engine_requests(&self) -> Vec<EngineRequest> {
        self.prompts
            .iter()
            .flat_map(|p| (0..self.best_of).map(|j| p.request.with_seed_offset(j as u64)))
            .collect()
    }

    /// Gives every prompt the objective `slo` (from the `X-TTFT-SLO-Ms` header) unless its
    /// body set one.
    pub fn with_default_ttft_slo(mut self, slo: Option<std::time::Duration>) -> Self {
        for p in &mut self.prompts {
            if p.request.ttft_slo().is_none() {
                p.request = p.request.clone().with_ttft_slo(slo);
            }
        }
        self
    }

    /// Prompt tokens over all prompts (each counted once).
    pub fn prompt_tokens(&self) -> usize {
        self.prompts
            .iter()
            .map(|p| p.request.prompt_ids().len())
            .sum()
    }
}

/// A validated TGI request.
#[derive(Debug, Clone)]
pub struct ValidGenerate {
    pub request: EngineRequest,
    /// Include `details` in the response.
    pub details: bool,
    /// Prepended to `generated_text` (`return_full_text`).
    pub text_prefix: Option<String>,
}

impl ValidGenerate {
    /// The objective `slo` (from the `X-TTFT-SLO-Ms` header) unless the body set one.
    pub fn with_default_ttft_slo(mut self, slo: Option<std::time::Duration>) -> Self {
        if self.request.ttft_slo().is_none() {
            self.request = self.request.with_ttft_slo(slo);
        }
        self
    }
}

/// A wire request that validation turns into its validated form.
pub trait Validate: Send + Sized + 'static {
    /// The validated request.
    type Valid: Send + 'static;
    /// Checks `self` and builds the engine request (templating and tokenizing the prompt).
    fn validate(self, state: &AppState, arrival: Instant) -> Result<Self::Valid, ApiError>;
}

impl Validate for CompletionRequest {
    type Valid = ValidRequest;
    fn validate(self, state: &AppState, arrival: Instant) -> Result<ValidRequest, ApiError> {
        completion(state, self, arrival)
    }
}

impl Validate for ChatCompletionRequest {
    type Valid = ValidRequest;
    fn validate(self, state: &AppState, arrival: Instant) -> Result<ValidRequest, ApiError> {
        chat(state, self, arrival)
    }
}

impl Validate for GenerateRequest {
    type Valid = ValidGenerate;
    fn validate(self, state: &AppState, arrival: Instant) -> Result<ValidGenerate, ApiError> {
        generate(state, self, arrival)
    }
}

/// Validates `req` on the blocking pool: rendering the chat template and tokenizing take time
/// proportional to the prompt, which must not stall the async workers serving other
/// connections.
pub async fn validate_off_thread<W: Validate>(
    state: &AppState,
    req: W,
    arrival: Instant,
) -> Result<W::Valid, ApiError> {
    let state = state.clone();
    blocking::run(move || req.validate(&state, arrival)).await
}

/// Validates `POST /v1/completions`.
pub fn completion(
    state: &AppState,
    mut req: CompletionRequest,
    arrival: Instant,
) -> Result<ValidRequest, ApiError> {
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::param("suffix", "suffix is not supported"));
    }
    let echo = req.echo.unwrap_or(false);
    if echo && req.logprobs.is_some() {
        return Err(ApiError::param(
            "echo",
            "echo with logprobs needs prompt logprobs, which are not computed; \
             request logprobs without echo",
        ));
    }
    let stream = req.stream.unwrap_or(false);
    let (adapter_name, adapter) = openai_adapter(state, req.model.take())?;
    let fields = req.sampling_fields();
    let n = choices_n(fields.n)?;
    let best_of = best_of(req.best_of, n, stream)?;
    let user_logprobs = match req.logprobs {
        None => None,
        Some(n) => Some(bounded("logprobs", n, ranges::LOGPROBS)? as usize),
    };
    // Ranking candidates needs each chosen token's logprob.
    let logprobs = user_logprobs.or((best_of > n).then_some(0));
    let (sampling, sched) = openai_sampling(state, fields, logprobs)?;
    let grammar = constraint::checked(state, req.structured_fields())?;
    let prompts = completion_prompts(state, req.prompt)?;
    if prompts.len() * best_of > MAX_CANDIDATES {
        return Err(ApiError::param(
            "prompt",
            format!(
                "{} prompts × {best_of} candidates exceed the limit of {MAX_CANDIDATES} \
                 generations per request",
                prompts.len()
            ),
        ));
    }
    let prompts = prompts
        .into_iter()
        .map(|(ids, text)| {
            let max_tokens = max_tokens(
                state.limits(),
                ids.len(),
                req.max_tokens,
                "max_tokens",
                COMPLETION_DEFAULT_MAX_TOKENS,
            )?;
            let echo = echo.then(|| text.unwrap_or_else(|| state.tokenizer().decode(&ids, true)));
            let sampling = SamplingParams {
                max_tokens,
                ..sampling.clone()
            };
            let request = engine_request(state, ids, sampling, sched.clone(), arrival)?;
            Ok(ValidPrompt {
                request: request.with_adapter(adapter).with_grammar(grammar.clone()),
                echo,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let options = req.stream_options.unwrap_or_default();
    Ok(ValidRequest {
        prompts,
        n,
        best_of,
        stream,
        include_usage: options.include_usage,
        logprobs: user_logprobs.is_some(),
        adapter: adapter_name,
        tools: None,
        prompt_logprobs: prompt_logprobs(req.prompt_logprobs, stream)?,
        reasoning: None,
    })
}

/// Validates `POST /v1/chat/completions`.
pub fn chat(
    state: &AppState,
    mut req: ChatCompletionRequest,
    arrival: Instant,
) -> Result<ValidRequest, ApiError> {
    let logprobs = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (false, Some(_)) => {
            return Err(ApiError::param(
                "top_logprobs",
                "top_logprobs requires logprobs: true",
            ))
        }
        (false, None) => None,
        (true, top) => Some(bounded("top_logprobs", top.unwrap_or(0), ranges::LOGPROBS)? as usize),
    };
    let max_tokens = match (req.max_completion_tokens, req.max_tokens) {
        (Some(m), _) => (Some(m), "max_completion_tokens"),
        (None, m) => (m, "max_tokens"),
    };
    let turns = req
        .messages
        .iter()
        .map(prompt_ids::chat_message)
        .collect::<Result<Vec<_>, _>>()?;
    let call = ChatCall {
        model: req.model.take(),
        turns,
        tools: req.tools.take(),
        tool_choice: req.tool_choice.take(),
        parallel_tool_calls: req.parallel_tool_calls,
        auto_without_format: AutoWithoutFormat::Refuse,
        kwargs: req.chat_template_kwargs.take(),
        sampling: req.sampling_fields(),
        structured: req.structured_fields(),
        max_tokens: MaxTokens {
            requested: max_tokens.0,
            param: max_tokens.1,
            clamp: false,
        },
        logprobs,
        prompt_logprobs: req.prompt_logprobs,
        stream: req.stream.unwrap_or(false),
        include_usage: req.stream_options.unwrap_or_default().include_usage,
    };
    chat_call::validate(state, call, arrival)
}

/// Validates `POST /generate` and `POST /generate_stream`.
pub fn generate(
    state: &AppState,
    req: GenerateRequest,
    arrival: Instant,
) -> Result<ValidGenerate, ApiError> {
    let mut p = req.parameters;
    unsupported_tgi(&p)?;
    let adapter = match p.adapter_id.take() {
        None => None,
        Some(name) => Some(
            state
                .backend()
                .adapter_id(&name)
                .ok_or(ApiError::Adapter(AdapterError::NotFound(name)))?,
        ),
    };
    let grammar = constraint::checked_tgi(state, p.grammar.take())?;
    let prompt_ids = encode(state, &req.inputs, true, "inputs")?;
    let max_tokens = max_tokens(
        state.limits(),
        prompt_ids.len(),
        p.max_new_tokens,
        "max_new_tokens",
        TGI_DEFAULT_MAX_NEW_TOKENS,
    )?;
    let sample = p.do_sample.unwrap_or(false)
        || p.temperature.is_some()
        || p.top_k.is_some()
        || p.top_p.is_some();
    let temperature = match p.temperature {
        Some(t) if !ranges::TGI_TEMPERATURE.contains(t) => {
            return Err(ApiError::param(
                "temperature",
                format!("temperature must be strictly positive, got {t}"),
            ))
        }
        Some(t) => t as f32,
        None if sample => 1.0,
        None => 0.0,
    };
    let filters = Filters {
        top_k: p.top_k,
        top_p: p.top_p,
        min_p: p.min_p,
        repetition_penalty: p.repetition_penalty,
        frequency_penalty: p.frequency_penalty,
        presence_penalty: None,
    };
    let sampling = SamplingParams {
        temperature,
        seed: p.seed,
        max_tokens,
        stop: stops(p.stop)?,
        ignore_eos: p.ignore_eos.unwrap_or(false),
        logprobs: match p.top_n_tokens {
            None => Some(0),
            Some(n) => Some(bounded("top_n_tokens", n, ranges::LOGPROBS)? as usize),
        },
        ..with_filters(filters)?
    };
    let sched = Scheduling {
        priority: priority(state, p.priority)?,
        cache_salt: None,
        ttft_slo: crate::validation::ttft_slo::from_field(p.ttft_slo_ms)?,
    };
    let request = engine_request(state, prompt_ids, sampling, sched, arrival)?;
    Ok(ValidGenerate {
        request: request.with_adapter(adapter).with_grammar(grammar),
        details: p.details.unwrap_or(false),
        text_prefix: p.return_full_text.unwrap_or(false).then_some(req.inputs),
    })
}

/// The LoRA adapter an OpenAI request's `model` names: none for the served model's id or no
/// `model`, else the adapter of that name (vLLM's rule); any other name is a 404.
fn openai_adapter(
    state: &AppState,
    model: Option<String>,
) -> Result<(Option<String>, Option<AdapterId>), ApiError> {
    let Some(model) = model.filter(|m| *m != state.model().model_id) else {
        return Ok((None, None));
    };
    match state.backend().adapter_id(&model) {
        Some(id) => Ok((Some(model), Some(id))),
        None => Err(ApiError::ModelNotFound(model)),
    }
}

fn unsupported_tgi(p: &crate::tgi::wire::GenerateParameters) -> Result<(), ApiError> {
    if p.best_of
        .is_some_and(|b| !ranges::TGI_BEST_OF.contains_int(b))
    {
        return Err(ApiError::param("best_of", "only best_of = 1 is supported"));
    }
    if p.decoder_input_details == Some(true) {
        return Err(ApiError::param(
            "decoder_input_details",
            "decoder_input_details is not supported",
        ));
    }
    if p.truncate.is_some() {
        return Err(ApiError::param("truncate", "truncate is not supported"));
    }
    if p.watermark == Some(true) {
        return Err(ApiError::param("watermark", "watermark is not supported"));
    }
    if p.typical_p
        .is_some_and(|t| !ranges::TGI_TYPICAL_P.contains(t))
    {
        return Err(ApiError::param("typical_p", "typical_p is not supported"));
    }
    Ok(())
}

fn engine_request(
    state: &AppState,
    prompt_ids: Vec<u32>,
    sampling: SamplingParams,
    sched: Scheduling,
    arrival: Instant,
) -> Result<EngineRequest, ApiError> {
    Ok(
        EngineRequest::new(prompt_ids, sampling, &state.backend().request_limits())?
            .with_priority(sched.priority)
            .with_cache_salt(sched.cache_salt)
            .with_ttft_slo(sched.ttft_slo)
            .with_arrival(arrival)
            .with_max_queue_time(state.limits().max_queue_time),
    )
}
