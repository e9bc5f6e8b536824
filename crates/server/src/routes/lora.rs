//! Run-time LoRA routes (vLLM's), mounted only with `--enable-runtime-lora` (otherwise they
//! answer 404 with a message saying so):
//!
//! * `POST /v1/load_lora_adapter {"lora_name", "lora_path"}` — 200 `Success: ...` (plain
//!   text, as vLLM); 400 for a name already loaded, an unreadable or malformed adapter, or a
//!   rank above `--max-lora-rank`; 503 when every resident adapter is in use.
//! * `POST /v1/unload_lora_adapter {"lora_name"}` — 200 `Success: ...`; 404 for an unknown
//!   name; 409 while running or waiting requests use the adapter (the message says how many).
//!
//! The engine thread loads and unloads (it owns the model); the handlers wait for it on the
//! blocking pool.

use std::path::PathBuf;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::blocking;
use crate::error::{ApiError, OpenAiError};
use crate::extract::Wire;
use crate::openai::wire::ErrorBody;
use crate::state::AppState;
use crate::wire::lora::{LoadLoraAdapterRequest, UnloadLoraAdapterRequest};

/// Load a LoRA adapter at run time.
#[utoipa::path(post, path = "/v1/load_lora_adapter", request_body = LoadLoraAdapterRequest,
    responses((status = 200, description = "Loaded", body = String),
              (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn load(
    State(state): State<AppState>,
    body: Result<Wire<LoadLoraAdapterRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let Wire(req) = body?;
    if req.lora_name.is_empty() || req.lora_path.is_empty() {
        return Err(ApiError::Invalid("both lora_name and lora_path must be given".into()).into());
    }
    let name = req.lora_name.clone();
    let backend = state.backend().clone();
    blocking::run(move || backend.load_adapter(&req.lora_name, PathBuf::from(req.lora_path)))
        .await?;
    tracing::info!(adapter = %name, "LoRA adapter loaded");
    Ok(format!("Success: LoRA adapter '{name}' added successfully.").into_response())
}

/// Unload a LoRA adapter at run time.
#[utoipa::path(post, path = "/v1/unload_lora_adapter", request_body = UnloadLoraAdapterRequest,
    responses((status = 200, description = "Unloaded", body = String),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn unload(
    State(state): State<AppState>,
    body: Result<Wire<UnloadLoraAdapterRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let Wire(req) = body?;
    let name = req.lora_name.clone();
    let backend = state.backend().clone();
    blocking::run(move || backend.unload_adapter(&req.lora_name)).await?;
    tracing::info!(adapter = %name, "LoRA adapter unloaded");
    Ok(format!("Success: LoRA adapter '{name}' removed successfully.").into_response())
}

/// Both routes when run-time loading is off.
pub async fn disabled() -> OpenAiError {
    OpenAiError(ApiError::NotFound(
        "run-time LoRA loading is disabled: start the server with --enable-runtime-lora".into(),
    ))
}
