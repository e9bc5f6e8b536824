//! OpenAI-compatible routes: `POST /v1/completions`, `POST /v1/chat/completions`,
//! `GET /v1/models`.

use std::sync::Mutex;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::{json_response, ApiError, OpenAiError};
use crate::extract::Wire;
use crate::generation::{self, ChoiceOutput};
use crate::logprobs;
use crate::openai_stream::{usage_info, ChatEncoder, ChunkMeta, CompletionEncoder};
use crate::request_log::{LoggedByHandler, Tally};
use crate::sse::sse_response;
use crate::state::{unix_now, AppState};
use crate::validation::{self, ValidRequest};
use crate::wire::openai::{
    ChatChoice, ChatCompletionRequest, ChatCompletionResponse, ChatMessageOut, CompletionChoice,
    CompletionRequest, CompletionResponse, ErrorBody, ModelCard, ModelList,
};

/// Which OpenAI route a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Completions,
    Chat,
}

/// Submitted choices of a request, ready to stream or collect.
struct Running {
    valid: ValidRequest,
    streams: Vec<kestrel_engine::handle::ResponseStream>,
    meta: ChunkMeta,
    tally: Tally,
}

fn start(state: &AppState, valid: ValidRequest, api: Api) -> Result<Running, ApiError> {
    let streams = generation::submit_all(state, (0..valid.n).map(|i| valid.for_choice(i)))?;
    let first = streams.first().map_or(0, |s| s.request_id());
    let (prefix, route) = match api {
        Api::Completions => ("cmpl", "/v1/completions"),
        Api::Chat => ("chatcmpl", "/v1/chat/completions"),
    };
    Ok(Running {
        meta: ChunkMeta {
            id: format!("{prefix}-{first}"),
            created: unix_now(),
            model: state.model().model_id.clone(),
        },
        tally: Tally::new(route, valid.request.prompt_ids().len(), valid.n),
        valid,
        streams,
    })
}

/// Collects every choice; a failure becomes an error response that the tally logs.
async fn collect(run: Running) -> Result<(Running, Vec<ChoiceOutput>), Response> {
    let Running {
        valid,
        streams,
        meta,
        tally,
    } = run;
    let tally = Mutex::new(tally);
    let result = generation::collect_all(streams, &tally).await;
    let mut tally = tally.into_inner().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok(outputs) => Ok((
            Running {
                valid,
                streams: Vec::new(),
                meta,
                tally,
            },
            outputs,
        )),
        Err(e) => {
            tally.set_status(e.kind().status().as_u16());
            Err(logged(OpenAiError(e).into_response()))
        }
    }
}

fn logged(mut response: Response) -> Response {
    response.extensions_mut().insert(LoggedByHandler);
    response
}

/// Text completion.
#[utoipa::path(post, path = "/v1/completions", request_body = CompletionRequest,
    responses((status = 200, description = "The completion, or an SSE stream of chunks", body = CompletionResponse),
              (status = 400, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn completions(
    State(state): State<AppState>,
    body: Result<Wire<CompletionRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let arrival = Instant::now();
    let Wire(req) = body?;
    let valid = validation::completion(&state, req, arrival)?;
    let run = start(&state, valid, Api::Completions)?;
    let wants_logprobs = run.valid.request.sampling().logprobs.is_some();
    if run.valid.stream {
        let (n, usage) = (run.valid.n, run.valid.include_usage);
        let enc =
            CompletionEncoder::new(state.clone(), run.meta, usage, run.tally, n, wants_logprobs);
        return Ok(sse_response(run.streams, enc));
    }
    let (run, outputs) = match collect(run).await {
        Ok(r) => r,
        Err(response) => return Ok(response),
    };
    let usage = generation::total_usage(run.valid.request.prompt_ids().len(), &outputs);
    let choices = outputs
        .into_iter()
        .enumerate()
        .map(|(index, o)| CompletionChoice {
            index,
            logprobs: wants_logprobs
                .then(|| logprobs::completion(state.tokenizer(), &o.tokens, &mut 0)),
            text: o.text,
            finish_reason: Some(o.reason.as_str().to_string()),
        })
        .collect();
    let body = CompletionResponse {
        id: run.meta.id.clone(),
        object: "text_completion",
        created: run.meta.created,
        model: run.meta.model.clone(),
        choices,
        usage: Some(usage_info(usage)),
    };
    Ok(logged(json_response(StatusCode::OK, &body)))
}

/// Chat completion (the model's chat template applied to `messages`).
#[utoipa::path(post, path = "/v1/chat/completions", request_body = ChatCompletionRequest,
    responses((status = 200, description = "The reply, or an SSE stream of chunks", body = ChatCompletionResponse),
              (status = 400, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn chat_completions(
    State(state): State<AppState>,
    body: Result<Wire<ChatCompletionRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let arrival = Instant::now();
    let Wire(req) = body?;
    let valid = validation::chat(&state, req, arrival)?;
    let run = start(&state, valid, Api::Chat)?;
    let wants_logprobs = run.valid.request.sampling().logprobs.is_some();
    if run.valid.stream {
        let (n, usage) = (run.valid.n, run.valid.include_usage);
        let enc = ChatEncoder::new(state.clone(), run.meta, usage, run.tally, n, wants_logprobs);
        return Ok(sse_response(run.streams, enc));
    }
    let (run, outputs) = match collect(run).await {
        Ok(r) => r,
        Err(response) => return Ok(response),
    };
    let usage = generation::total_usage(run.valid.request.prompt_ids().len(), &outputs);
    let choices = outputs
        .into_iter()
        .enumerate()
        .map(|(index, o)| ChatChoice {
            index,
            logprobs: wants_logprobs.then(|| logprobs::chat(state.tokenizer(), &o.tokens)),
            message: ChatMessageOut {
                role: "assistant",
                content: o.text,
            },
            finish_reason: o.reason.as_str().to_string(),
        })
        .collect();
    let body = ChatCompletionResponse {
        id: run.meta.id.clone(),
        object: "chat.completion",
        created: run.meta.created,
        model: run.meta.model.clone(),
        choices,
        usage: usage_info(usage),
    };
    Ok(logged(json_response(StatusCode::OK, &body)))
}

/// The served model.
#[utoipa::path(get, path = "/v1/models", responses((status = 200, body = ModelList)))]
pub async fn models(State(state): State<AppState>) -> Response {
    let body = ModelList {
        object: "list",
        data: vec![ModelCard {
            id: state.model().model_id.clone(),
            object: "model",
            created: state.created(),
            owned_by: "kestrel",
            max_model_len: state.limits().max_total_tokens,
        }],
    };
    json_response(StatusCode::OK, &body)
}
