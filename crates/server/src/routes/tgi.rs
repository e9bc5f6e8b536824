//! Text Generation Inference-compatible routes: `POST /generate`, `POST /generate_stream`,
//! `GET /info`, `POST /tokenize`.

use std::sync::Mutex;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kestrel_engine::api::{EngineEvent, TokenEvent};
use kestrel_engine::request::FinishReason;

use crate::error::{json_response, ApiError, TgiError};
use crate::extract::Wire;
use crate::generation;
use crate::request_log::{LoggedByHandler, Tally};
use crate::sse::{json, sse_response, SseEncoder};
use crate::state::{AppState, MAX_STOP_SEQUENCES};
use crate::validation::{self, ValidGenerate};
use crate::wire::tgi::{
    GenerateDetails, GenerateRequest, GenerateResponse, Info, SimpleToken, StreamResponse,
    StreamToken, TgiErrorBody, TokenizeRequest,
};

/// TGI's finish reason names.
fn finish_reason(reason: FinishReason, stops: bool) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Stop if stops => "stop_sequence",
        FinishReason::Stop | FinishReason::Abort => "eos_token",
    }
}

fn details(valid: &ValidGenerate, reason: FinishReason, generated: usize) -> GenerateDetails {
    let sampling = valid.request.sampling();
    GenerateDetails {
        finish_reason: finish_reason(reason, !sampling.stop.is_empty()).to_string(),
        generated_tokens: generated,
        seed: sampling.seed,
        input_length: valid.request.prompt_ids().len(),
    }
}

/// Generate text (one response when done).
#[utoipa::path(post, path = "/generate", request_body = GenerateRequest,
    responses((status = 200, body = GenerateResponse), (status = 422, body = TgiErrorBody),
              (status = 429, body = TgiErrorBody)))]
pub async fn generate(
    State(state): State<AppState>,
    body: Result<Wire<GenerateRequest>, ApiError>,
) -> Result<Response, TgiError> {
    let arrival = Instant::now();
    let Wire(req) = body?;
    let valid = validation::generate(&state, req, arrival)?;
    let streams = generation::submit_all(&state, [valid.request.clone()])?;
    let tally = Mutex::new(Tally::new("/generate", valid.request.prompt_ids().len(), 1));
    let result = generation::collect_all(streams, &tally).await;
    let mut tally = tally.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut response = match result.map(|mut o| o.pop()) {
        Ok(Some(out)) => {
            let text = match &valid.text_prefix {
                Some(prefix) => format!("{prefix}{}", out.text),
                None => out.text,
            };
            let body = GenerateResponse {
                generated_text: text,
                details: valid
                    .details
                    .then(|| details(&valid, out.reason, out.usage.completion_tokens)),
            };
            json_response(StatusCode::OK, &body)
        }
        Ok(None) => TgiError(ApiError::Internal("no output".into())).into_response(),
        Err(e) => {
            tally.set_status(TgiError(e.clone()).into_response().status().as_u16());
            TgiError(e).into_response()
        }
    };
    response.extensions_mut().insert(LoggedByHandler);
    Ok(response)
}

/// Generate text as server-sent events, one per token; the last carries the whole text.
#[utoipa::path(post, path = "/generate_stream", request_body = GenerateRequest,
    responses((status = 200, description = "SSE stream", body = StreamResponse),
              (status = 422, body = TgiErrorBody), (status = 429, body = TgiErrorBody)))]
pub async fn generate_stream(
    State(state): State<AppState>,
    body: Result<Wire<GenerateRequest>, ApiError>,
) -> Result<Response, TgiError> {
    let arrival = Instant::now();
    let Wire(req) = body?;
    let valid = validation::generate(&state, req, arrival)?;
    let streams = generation::submit_all(&state, [valid.request.clone()])?;
    let tally = Tally::new("/generate_stream", valid.request.prompt_ids().len(), 1);
    let encoder = TgiEncoder {
        state,
        valid,
        tally,
        text: String::new(),
        count: 0,
        last: None,
    };
    Ok(sse_response(streams, encoder))
}

/// Encodes one TGI stream. The final token event is held back until `Finished` arrives so it can
/// carry `generated_text` and `details`.
struct TgiEncoder {
    state: AppState,
    valid: ValidGenerate,
    tally: Tally,
    text: String,
    count: usize,
    last: Option<TokenEvent>,
}

impl TgiEncoder {
    fn token(&self, t: &TokenEvent) -> (StreamToken, Vec<StreamToken>) {
        let tok = self.state.tokenizer();
        let special = tok.eos_ids().contains(&t.id) || tok.bos_id() == Some(t.id);
        let (logprob, top) = match &t.logprobs {
            Some(lp) => (
                lp.chosen.logprob,
                lp.top
                    .iter()
                    .map(|a| StreamToken {
                        id: a.token,
                        text: tok.decode(&[a.token], false),
                        logprob: a.logprob,
                        special: tok.eos_ids().contains(&a.token),
                    })
                    .collect(),
            ),
            None => (0.0, Vec::new()),
        };
        let token = StreamToken {
            id: t.id,
            text: t.text.clone(),
            logprob,
            special,
        };
        (token, top)
    }

    fn frame(&self, t: &TokenEvent, end: Option<(String, GenerateDetails)>) -> String {
        let (token, top_tokens) = self.token(t);
        let (generated_text, details) = match end {
            Some((text, d)) => (Some(text), Some(d)),
            None => (None, None),
        };
        json(&StreamResponse {
            index: self.count,
            token,
            top_tokens,
            generated_text,
            details: details.filter(|_| self.valid.details),
        })
    }
}

impl SseEncoder for TgiEncoder {
    fn event(&mut self, _index: usize, event: EngineEvent) -> Vec<String> {
        self.tally.observe(&event);
        match event {
            EngineEvent::Token(t) => {
                self.text.push_str(&t.text);
                let out = self.last.take().map(|prev| self.frame(&prev, None));
                self.count += usize::from(out.is_some());
                self.last = Some(t);
                out.into_iter().collect()
            }
            EngineEvent::Finished {
                reason,
                text,
                usage,
                ..
            } => {
                self.text.push_str(&text);
                let mut last = self.last.take().unwrap_or(TokenEvent {
                    id: 0,
                    text: String::new(),
                    logprobs: None,
                });
                last.text.push_str(&text);
                self.count += 1;
                let full = match &self.valid.text_prefix {
                    Some(prefix) => format!("{prefix}{}", self.text),
                    None => self.text.clone(),
                };
                let d = details(&self.valid, reason, usage.completion_tokens);
                vec![self.frame(&last, Some((full, d)))]
            }
            EngineEvent::Failed(f) => {
                let e = ApiError::from(f);
                vec![json(&TgiErrorBody {
                    error: e.to_string(),
                    error_type: "generation".into(),
                })]
            }
        }
    }

    fn end(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// Server and model limits.
#[utoipa::path(get, path = "/info", responses((status = 200, body = Info)))]
pub async fn info(State(state): State<AppState>) -> Response {
    let engine = state.engine().config();
    let kv = state.engine().stats();
    let limits = state.limits();
    let body = Info {
        model_id: state.model().model_id.clone(),
        model_dtype: state.model().dtype.clone(),
        model_device_type: "cpu",
        router: "kestrel",
        version: env!("CARGO_PKG_VERSION"),
        max_concurrent_requests: engine.max_concurrent_requests.unwrap_or(usize::MAX),
        max_best_of: 1,
        max_stop_sequences: MAX_STOP_SEQUENCES,
        max_input_tokens: limits.max_input_tokens,
        max_total_tokens: limits.max_total_tokens,
        max_batch_prefill_tokens: engine.max_num_batched_tokens,
        max_batch_size: engine.max_num_seqs,
        block_size: kv.block_size,
        num_kv_blocks: kv.num_kv_blocks,
    };
    json_response(StatusCode::OK, &body)
}

/// Tokenize text as generation would.
#[utoipa::path(post, path = "/tokenize", request_body = TokenizeRequest,
    responses((status = 200, body = Vec<SimpleToken>), (status = 422, body = TgiErrorBody)))]
pub async fn tokenize(
    State(state): State<AppState>,
    body: Result<Wire<TokenizeRequest>, ApiError>,
) -> Result<Response, TgiError> {
    let Wire(req) = body?;
    let tok = state.tokenizer();
    let ids = tok
        .encode(&req.inputs, req.add_special_tokens.unwrap_or(true))
        .map_err(|e| ApiError::param("inputs", format!("cannot tokenize: {e}")))?;
    let mut start = 0;
    let tokens: Vec<SimpleToken> = ids
        .iter()
        .map(|&id| {
            let text = tok.decode(&[id], false);
            let token = SimpleToken {
                id,
                start,
                stop: start + text.len(),
                text,
            };
            start = token.stop;
            token
        })
        .collect();
    Ok(json_response(StatusCode::OK, &tokens))
}
