//! OpenAI-compatible routes: `POST /v1/completions`, `POST /v1/chat/completions`,
//! `GET /v1/models`.
//!
//! Both generation routes run [`handle`]; they differ only in their [`OpenAiApi`]
//! ([`Completions`] or [`Chat`]):
//!
//! ```text
//! Wire<A::Request> ─► validate (blocking pool) ─► prompt_logprobs (if asked)
//!                  ─► SubmittedChoices::submit × n
//!                  ─► stream: OpenAiEncoder<A>  |  collect ─► A::response
//! ```

use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use crate::error::{json_response, ApiError, OpenAiError};
use crate::extract::Wire;
use crate::model_slot::ModelState;
use crate::openai::api::{Chat, Completions, OpenAiApi, OpenAiContext};
use crate::openai::best_of::CandidateRanking;
use crate::openai::prompt_logprobs;
use crate::openai::stream::OpenAiEncoder;
use crate::openai::wire::{
    ChatCompletionRequest, ChatCompletionResponse, CompletionRequest, CompletionResponse,
    ErrorBody, ModelCard, ModelList, ModelStatus,
};
use crate::request_scope::RequestScope;
use crate::response_id::{response_id, system_fingerprint};
use crate::state::{unix_now, AppState};
use crate::submitted_choices::{respond, SubmittedChoices};
use crate::validation;

/// The handler core of both generation routes.
async fn handle<A: OpenAiApi>(
    state: AppState,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<A::Request>, ApiError>,
) -> Result<Response, OpenAiError> {
    let arrival = Instant::now();
    let scope = scope?;
    let Wire(req) = body?;
    let valid = validation::validate_off_thread(&state, req, arrival)
        .await?
        .with_default_ttft_slo(scope.ttft_slo);
    let prompt_logprobs = prompt_logprobs::compute(&state, &valid).await?;
    let submitted = SubmittedChoices::submit_valid(&state, A::ROUTE, &valid, &scope).await?;
    let echo: Vec<Option<String>> = valid.prompts.iter().map(|p| p.echo.clone()).collect();
    let cx = OpenAiContext {
        id: response_id(A::ID_PREFIX),
        system_fingerprint: system_fingerprint(&state.model().model_id),
        created: unix_now(),
        model: valid
            .adapter
            .clone()
            .unwrap_or_else(|| state.model().model_id.clone()),
        include_usage: valid.include_usage,
        logprobs: valid.logprobs,
        tools: valid.tools.clone(),
        prompt_logprobs,
        n: valid.n,
        reasoning: valid.reasoning,
        // Streaming never ranks (best_of == n): choice p * n + j belongs to prompt p.
        echo: echo
            .iter()
            .flat_map(|e| std::iter::repeat_n(e.clone(), valid.n))
            .collect(),
        state,
    };
    if valid.stream {
        let choices = valid.prompts.len() * valid.n;
        return Ok(submitted.into_sse(OpenAiEncoder::<A>::new(cx, choices)));
    }
    let (tally, outputs) = submitted.collect().await;
    let usage = tally.usage();
    let ranking = CandidateRanking::of(&valid);
    let result = outputs.map(|outputs| A::response(&cx, ranking.choices(outputs, &echo), usage));
    Ok(respond::<OpenAiError>(tally, result))
}

/// Text completion.
#[utoipa::path(post, path = "/v1/completions", request_body = CompletionRequest,
    responses((status = 200, description = "The completion, or an SSE stream of chunks", body = CompletionResponse),
              (status = 400, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn completions(
    State(state): State<AppState>,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<CompletionRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    handle::<Completions>(state, scope, body).await
}

/// Chat completion (the model's chat template applied to `messages`).
#[utoipa::path(post, path = "/v1/chat/completions", request_body = ChatCompletionRequest,
    responses((status = 200, description = "The reply, or an SSE stream of chunks", body = ChatCompletionResponse),
              (status = 400, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn chat_completions(
    State(state): State<AppState>,
    scope: Result<RequestScope, ApiError>,
    body: Result<Wire<ChatCompletionRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    handle::<Chat>(state, scope, body).await
}

/// The served model, then each LoRA adapter (with the base model as its `parent`), then the
/// models served beside it, each followed by its adapters.
#[utoipa::path(get, path = "/v1/models", responses((status = 200, body = ModelList)))]
pub async fn models(State(state): State<AppState>) -> Response {
    let base = state.model().model_id.clone();
    let card =
        |id: String, root: String, parent: Option<String>, status: Option<ModelState>| ModelCard {
            id,
            object: "model",
            created: state.created(),
            owned_by: "kestrel",
            root,
            parent,
            max_model_len: Some(state.limits().max_total_tokens),
            status: status.map(|s| ModelStatus {
                value: s.as_str(),
                error: None,
            }),
            aliases: Vec::new(),
        };
    let own = state.backend().model_state();
    let mut data = vec![card(base.clone(), base.clone(), None, own)];
    for a in state.backend().adapters() {
        let root = a.path.display().to_string();
        data.push(card(a.name, root, Some(base.clone()), own));
    }
    for peer in state.backend().peer_models() {
        data.push(ModelCard {
            max_model_len: Some(peer.max_model_len),
            ..card(peer.id.clone(), peer.id.clone(), None, peer.state)
        });
        for a in peer.adapters {
            let root = a.path.display().to_string();
            data.push(ModelCard {
                max_model_len: Some(peer.max_model_len),
                ..card(a.name, root, Some(peer.id.clone()), peer.state)
            });
        }
    }
    let body = ModelList {
        object: "list",
        data,
    };
    json_response(StatusCode::OK, &body)
}
