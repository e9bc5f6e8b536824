//! [`router`]: the front of a multi-model `kestrel serve` ([`ModelRegistry`]). Each loaded
//! model has the single-model server's routes ([`crate::routes::router`]) over its own engine;
//! this router picks which model's routes answer a request, loading the model first when
//! needed, and answers the routes that concern every model itself.
//!
//! ```text
//! GET  /v1/models        every model with `status.value` loaded | loading | unloaded, its
//!                        aliases, then its LoRA adapters (`parent`: the model)
//! POST /models/load      {"model": NAME}: load it now (as a request for it would)
//! POST /models/unload    {"model": NAME}: unload it (409 if busy or pinned)
//! GET  /health*, /metrics, the playground: answered here (no model is loaded for them)
//! anything else          POST: the body's `model` picks the model: a model's name, an alias
//!                        (the body is passed on naming the model) or a LoRA adapter's name
//!                        (the model serving it); 404 unknown name, 400 none when several are
//!                        served. Other methods: the most recently used loaded model, else the
//!                        first given ─► that model's routes
//! ```
//!
//! A request holds its model (a [`crate::model_registry::Lease`]) until its response body
//! ends, so a model streaming a reply is never unloaded under it. Every route but the health
//! probes, `/metrics` and the playground needs the API key when one is configured; it is
//! checked before a model is loaded for the request.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use tower::ServiceExt;

use crate::auth::{require_api_key, ApiKey};
use crate::backend::BackendHealth;
use crate::error::{json_response, ApiError, OpenAiError};
use crate::extract::Wire;
use crate::model_registry::{Lease, ModelListing, ModelRegistry};
use crate::named_model::{named_model, Named};
use crate::openai::wire::{ModelCard, ModelList, ModelStatus};
use crate::routes::health::Liveness;

/// The body of `POST /models/load` and `POST /models/unload`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ModelAction {
    /// The model's name, as `/v1/models` lists it.
    pub model: String,
}

/// The front routes of a multi-model server.
pub fn router(registry: Arc<ModelRegistry>) -> Router {
    let config = registry.http().clone();
    let mut protected = Router::new()
        .route("/v1/models", get(list))
        .route("/models/load", post(load))
        .route("/models/unload", post(unload))
        // TGI's generate at `/`, beside the playground page's GET there.
        .route("/", post(dispatch))
        .route_layer(axum::middleware::from_fn(crate::metrics::count_requests))
        .route_layer(axum::middleware::from_fn(crate::request_log::log_requests))
        .fallback(dispatch);
    if !config.api_keys.is_empty() {
        protected = protected.layer(axum::middleware::from_fn_with_state(
            ApiKey::any_of(&config.api_keys).salting_the_cache(config.cache_salt_by_api_key),
            require_api_key,
        ));
    }
    let open = Router::new()
        .route("/health", get(health))
        .route("/health/ready", get(health))
        .route("/health/live", get(live))
        .route("/metrics", get(metrics))
        .merge(crate::routes::playground::routes())
        .route_layer(axum::middleware::from_fn(crate::request_log::log_requests));
    open.merge(protected)
        .layer(axum::Extension(crate::extract::BodyLimit(
            config.body_limit,
        )))
        .layer(axum::Extension(crate::extract::BodyTimeout(
            config.body_read_timeout,
        )))
        .layer(axum::Extension(crate::extract::ApiPolicy {
            strict: config.strict_api,
        }))
        .with_state(registry)
}

/// `GET /v1/models`: every model with its state.
async fn list(State(registry): State<Arc<ModelRegistry>>) -> Response {
    let created = crate::state::unix_now();
    let data = registry
        .listing()
        .into_iter()
        .flat_map(|m| with_adapters(m, created))
        .collect();
    json_response(
        StatusCode::OK,
        &ModelList {
            object: "list",
            data,
        },
    )
}

fn card(m: ModelListing, created: u64) -> ModelCard {
    ModelCard {
        id: m.name.clone(),
        object: "model",
        created,
        owned_by: "kestrel",
        root: m.name,
        parent: None,
        max_model_len: m.max_model_len,
        status: Some(ModelStatus {
            value: m.state.as_str(),
            error: m.error,
        }),
        aliases: m.aliases,
    }
}

/// The model's card, then one per LoRA adapter (vLLM's shape: `parent` is the model, `root`
/// the adapter's path) with the model's status.
fn with_adapters(mut m: ModelListing, created: u64) -> Vec<ModelCard> {
    let adapters = std::mem::take(&mut m.adapters);
    let base = card(m, created);
    let adapter_card = |(name, path): (String, String)| ModelCard {
        id: name,
        root: path,
        parent: Some(base.id.clone()),
        aliases: Vec::new(),
        ..base.clone()
    };
    let mut cards: Vec<ModelCard> = adapters.into_iter().map(adapter_card).collect();
    cards.insert(0, base);
    cards
}

/// The card of `name` as listed now.
fn card_of(registry: &ModelRegistry, name: &str) -> Response {
    let created = crate::state::unix_now();
    let name = registry.resolve(name).unwrap_or_else(|| name.to_string());
    match registry.listing().into_iter().find(|m| m.name == name) {
        Some(m) => json_response(StatusCode::OK, &card(m, created)),
        None => refuse("/models", ApiError::ModelNotFound(name.to_string())),
    }
}

/// `POST /models/load`: loads the model (unloading an idle one if needed) and returns its card.
async fn load(
    State(registry): State<Arc<ModelRegistry>>,
    body: Result<Wire<ModelAction>, ApiError>,
) -> Response {
    let name = match body {
        Ok(Wire(action)) => action.model,
        Err(e) => return refuse("/models/load", e),
    };
    match registry.acquire(&name).await {
        Ok(lease) => {
            drop(lease);
            card_of(&registry, &name)
        }
        Err(e) => refuse("/models/load", e.into()),
    }
}

/// `POST /models/unload`: unloads the model if it is loaded and idle; returns its card.
async fn unload(
    State(registry): State<Arc<ModelRegistry>>,
    body: Result<Wire<ModelAction>, ApiError>,
) -> Response {
    let name = match body {
        Ok(Wire(action)) => action.model,
        Err(e) => return refuse("/models/unload", e),
    };
    match registry.unload(&name).await {
        Ok(_) => card_of(&registry, &name),
        Err(e) => refuse("/models/unload", e.into()),
    }
}

/// Answers `req` with the routes of the model it names.
async fn dispatch(State(registry): State<Arc<ModelRegistry>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let (name, req) = match target(&registry, req).await {
        Ok(found) => found,
        Err(e) => return refuse(&path, e),
    };
    let lease = match registry.acquire(&name).await {
        Ok(lease) => lease,
        Err(e) => {
            tracing::info!(target: "kestrel::request", route = %path, model = %name, error = %e, "request refused");
            return refuse(&path, e.into());
        }
    };
    let response = match lease.model.router.clone().oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    holding(response, lease)
}

/// The model a request is for, and the request (its body read back in when it was read).
async fn target(registry: &ModelRegistry, req: Request) -> Result<(String, Request), ApiError> {
    if req.method() != Method::POST {
        return Ok((registry.default_name(), req));
    }
    let http = registry.http();
    let (parts, body) = req.into_parts();
    let bytes = crate::extract::read_body(body, http.body_limit, http.body_read_timeout).await?;
    let (name, bytes) = match named_model(&bytes) {
        Named::Model(name) => routed(registry, name, bytes)?,
        // The routes' own parsing gives the precise error.
        Named::NotJson => (registry.default_name(), bytes),
        Named::Nothing if registry.len() == 1 => (registry.default_name(), bytes),
        Named::Nothing => {
            return Err(ApiError::param(
                "model",
                format!(
                    "this server serves {} models: name one in `model` (GET /v1/models lists them)",
                    registry.len()
                ),
            ))
        }
    };
    Ok((name, Request::from_parts(parts, Body::from(bytes))))
}

/// The model serving the name a body gives, and the body to pass it: unchanged for a model's
/// or an adapter's name, naming the model for an alias (its routes know only its own name).
fn routed(
    registry: &ModelRegistry,
    named: String,
    body: axum::body::Bytes,
) -> Result<(String, axum::body::Bytes), ApiError> {
    match registry.resolve(&named) {
        Some(model) if model == named => Ok((model, body)),
        Some(model) => {
            let body = renamed(&body, &model)?;
            Ok((model, body))
        }
        None => match registry.model_of_adapter(&named) {
            Some(model) => Ok((model, body)),
            None => Err(ApiError::ModelNotFound(named)),
        },
    }
}

/// `body` (a JSON object) with `model` set to `model`.
fn renamed(body: &[u8], model: &str) -> Result<axum::body::Bytes, ApiError> {
    let mut json: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body)
        .map_err(|e| ApiError::param("model", format!("the body is not a JSON object: {e}")))?;
    json.insert("model".into(), serde_json::Value::String(model.to_string()));
    serde_json::to_vec(&json)
        .map(axum::body::Bytes::from)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// `response`, holding `lease` until its body has been sent (or dropped).
fn holding(response: Response, lease: Lease) -> Response {
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(HeldBody {
            inner: body,
            _lease: lease,
        }),
    )
}

/// A response body that keeps its model's lease until it is dropped; frames and size hint
/// are the inner body's (so a JSON reply keeps its `Content-Length`).
struct HeldBody {
    inner: Body,
    _lease: Lease,
}

impl hyper::body::Body for HeldBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// `e` in the shape of the route at `path`, with `Retry-After` on a 503.
fn refuse(path: &str, e: ApiError) -> Response {
    let unavailable = e.kind().status() == StatusCode::SERVICE_UNAVAILABLE;
    let mut response = crate::routes::error_for_path(path, e);
    if unavailable {
        let secs = crate::throughput::retry_after_secs(0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// `GET /health`: ready unless a loaded engine is stuck or the server is stopping; the load
/// is summed over the loaded models.
async fn health(State(registry): State<Arc<ModelRegistry>>) -> Response {
    let models = registry.loaded();
    let healths = tokio::task::spawn_blocking(move || {
        models
            .iter()
            .map(|m| m.state.backend().health())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let summed = BackendHealth {
        ready: healths.iter().all(|h| h.ready),
        running: healths.iter().map(|h| h.running).sum(),
        waiting: healths.iter().map(|h| h.waiting).sum(),
        kv_usage: healths.iter().map(|h| h.kv_usage).fold(0.0, f64::max),
    };
    crate::routes::health::readiness(summed, Vec::new())
}

async fn live() -> Response {
    json_response(StatusCode::OK, &Liveness { status: "ok" })
}

/// `GET /metrics`: the process's series (each engine records its own as it steps).
async fn metrics() -> Response {
    match crate::metrics::install_recorder() {
        Ok(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            crate::metrics::render_with(&handle, None),
        )
            .into_response(),
        Err(e) => OpenAiError(ApiError::Internal(e.to_string())).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alias_is_replaced_by_the_model_name_and_the_rest_kept() {
        let body = renamed(br#"{"prompt":"x","model":"alias","n":2}"#, "real").unwrap();
        assert_eq!(&body[..], br#"{"prompt":"x","model":"real","n":2}"#);
    }
}
