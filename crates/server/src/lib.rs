//! Kestrel's HTTP server: OpenAI-, Anthropic- and TGI-compatible routes over a [`backend::Backend`]: an
//! [`kestrel_engine::handle::EngineHandle`] in this process (`kestrel serve`) or a fleet of
//! workers (`kestrel gateway`).
//!
//! * [`serve`] / [`serve_on`] — run the server until a shutdown signal, then drain the engine.
//! * [`routes::router`] — the axum router: `/v1/completions`, `/v1/chat/completions`,
//!   `/v1/models`, `/v1/messages`, `/v1/messages/count_tokens`, `/generate`, `/generate_stream`, `/info`, `/tokenize`, `/health`,
//!   `/metrics`, `/openapi.json`, and with `--enable-runtime-lora` `/v1/load_lora_adapter`,
//!   `/v1/unload_lora_adapter` ([`routes::lora`]). Requests pick a LoRA adapter by OpenAI
//!   `model` or TGI `adapter_id` (resolved in [`validation`]). `GET /` is the web playground
//!   ([`routes::playground`]), `POST /` TGI's generate.
//! * One folder per API family: [`openai`] (`/v1/completions`, `/v1/chat/completions`,
//!   `/v1/models`, `/v1/embeddings`), [`anthropic`] (`/v1/messages`,
//!   `/v1/messages/count_tokens`), [`responses`] (OpenAI's Responses: `/v1/responses`,
//!   `/v1/responses/{id}`, with its in-memory store) and [`tgi`] (`/generate`,
//!   `/generate_stream`, `/info`, `/tokenize`). A family folder holds its routes, its wire
//!   types (`wire`: data only, serde and OpenAPI schemas) and its response and SSE shaping; a
//!   new family is a sibling folder.
//! * [`validation`] — the one place wire requests of every family become engine requests
//!   (parameter ranges, first-token objectives, structured output, chat tools), on the
//!   [`blocking`] pool; [`error::ApiError`] maps every failure to a status and the family's
//!   error body.
//! * Shared by the families: [`wire`] (cross-family wire pieces: stop strings, structured
//!   output, tool calls, LoRA), [`submitted_choices`] (submit the choices, merge their streams,
//!   collect them or stream them through [`sse`]), [`usage`] (sums their token counts),
//!   [`request_log`] (one line per request), [`backend`], [`request_scope`], [`tools`].
//! * [`auth`] — API keys (`Authorization: Bearer` or `x-api-key`); [`metrics`] — Prometheus.
//!
//! ```text
//! body ─► Wire<T> (size, UTF-8, JSON) ─► validation (blocking pool) ─► SubmittedChoices::submit × n
//!      ─► select_all ─► collect (JSON) or SseEncoder (text/event-stream) ─► one log line per request
//! ```

// Non-test code states its invariants instead of unwrapping (see the workspace's clippy lints).
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod anthropic;
pub mod auth;
pub mod backend;
pub mod base64;
pub mod blocking;
pub mod config;
pub mod connections;
pub mod cors;
pub mod error;
pub mod event_buffer;
pub mod extract;
pub mod fuzz_entry;
pub mod generation_defaults;
pub mod harmony;
pub mod heap_watch;
pub mod key_salt;
pub mod launch;
pub mod metrics;
pub mod model_aliases;
pub mod model_registry;
pub mod model_room;
pub mod model_router;
pub mod model_slot;
pub mod named_model;
pub mod openai;
pub mod otel;
pub mod reasoning;
pub mod reply_reader;
pub mod request_id;
pub mod request_log;
pub mod request_scope;
pub mod response_id;
pub mod responses;
pub mod retry_after;
pub mod routes;
pub mod sse;
pub mod state;
pub mod submitted_choices;
pub mod tgi;
pub mod throughput;
pub mod tools;
pub mod unknown_fields;
pub mod usage;
pub mod validation;
pub mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use backend::Backend;
pub use config::ServerConfig;
pub use state::{AppState, Limits, ModelInfo};

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Serve(std::io::Error),
}

/// Binds the configured address.
pub async fn bind(config: &ServerConfig) -> Result<TcpListener, ServerError> {
    let addr = format!("{}:{}", config.hostname, config.port);
    TcpListener::bind((config.hostname.as_str(), config.port))
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// Binds, serves until SIGINT or SIGTERM, then drains the engine (in-flight requests get
/// `config.shutdown_deadline`).
pub async fn serve(config: ServerConfig, state: AppState) -> Result<(), ServerError> {
    let listener = bind(&config).await?;
    serve_on(listener, config, state, shutdown_signal()).await
}

/// Serves on `listener` until `shutdown` resolves: stops accepting connections, waits for open
/// ones, then shuts the backend down on a blocking thread.
pub async fn serve_on(
    listener: TcpListener,
    config: ServerConfig,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let app = routes::router(&config, state.clone());
    serve_app(listener, app, state.backend().clone(), &config, shutdown).await
}

/// Serves `app` on `listener` until `shutdown` resolves; then `backend` drains: in-flight
/// requests get `config.shutdown_deadline`.
pub async fn serve_app(
    listener: TcpListener,
    app: axum::Router,
    backend: Arc<dyn Backend>,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let drain: Arc<dyn Fn(std::time::Duration) + Send + Sync> =
        Arc::new(move |deadline| backend.shutdown(deadline));
    serve_draining(listener, app, drain, config, shutdown).await
}

/// Serves the models of `registry` on `listener` ([`model_router::router`]) until `shutdown`
/// resolves; then every loaded engine drains within `config.shutdown_deadline`.
pub async fn serve_models(
    listener: TcpListener,
    registry: Arc<model_registry::ModelRegistry>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let config = registry.http().clone();
    let app = model_router::router(registry.clone())
        .layer(axum::middleware::from_fn(crate::request_id::assign));
    let drain: Arc<dyn Fn(std::time::Duration) + Send + Sync> =
        Arc::new(move |deadline| registry.shutdown(deadline));
    serve_draining(listener, app, drain, &config, shutdown).await
}

/// Serves `app` on `listener` until `shutdown` resolves; then `drain` (blocking) stops the
/// engines, giving in-flight requests `config.shutdown_deadline`.
async fn serve_draining(
    listener: TcpListener,
    app: axum::Router,
    backend: Arc<dyn Fn(std::time::Duration) + Send + Sync>,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let local: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(addr = ?local, "listening");
    let deadline = config.shutdown_deadline;
    // When the signal comes, the backend starts draining at once, so that streams still open
    // finish (or fail with "shutting down") within the deadline and the connections close.
    let draining = backend.clone();
    let drain = async move {
        shutdown.await;
        tracing::info!("shutdown signal received; draining");
        tokio::task::spawn_blocking(move || draining(deadline));
    };
    let policy = connections::ConnectionPolicy {
        max_connections: config.max_connections,
        header_read_timeout: config.header_read_timeout,
        drain_limit: deadline + config::SHUTDOWN_GRACE,
    };
    if !connections::serve(listener, app, policy, drain).await {
        tracing::warn!("connections still open after the shutdown deadline; closing them");
    }
    // Waits for the drain (a no-op if it already finished), bounded like the connections.
    let wait = tokio::task::spawn_blocking(move || backend(deadline));
    let _ = tokio::time::timeout(deadline + config::SHUTDOWN_GRACE, wait).await;
    tracing::info!("server stopped");
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
