//! [`dispatch`]: which model's routes answer a request. With one served model, all of them
//! (as `kestrel serve` answers every request with its model). With several, a POST's JSON
//! `model` picks them (a LoRA adapter's name picks the model whose workers serve it): an
//! unknown name is a 404 (`model_not_found`), none at all a 400, since
//! no request may be answered by a model its client did not ask for (refusals in the shape of
//! the route's API family: Anthropic's under `/v1/messages`). Other requests (health,
//! metrics, `/v1/models`, which lists every model, the playground) go to the first model's
//! routes. Before any model is known: `/metrics`, the playground page, and 503 for the rest.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use kestrel_server::error::{ApiError, OpenAiError};
use kestrel_server::named_model::{named_model, Named};
use kestrel_server::ServerConfig;
use metrics_exporter_prometheus::PrometheusHandle;
use tower::ServiceExt;

use super::models::Served;
use super::GatewayShared;

/// Answers `req` with the routes of the model it names.
pub async fn dispatch(
    shared: &GatewayShared,
    http: &ServerConfig,
    metrics: &PrometheusHandle,
    req: Request,
) -> Response {
    let models = shared.models.all();
    let Some(first) = models.first() else {
        return before_any_model(metrics, req);
    };
    if models.len() == 1 || req.method() != Method::POST {
        return answer(first, req).await;
    }
    let (parts, body) = req.into_parts();
    // Refusals take the shape of the route's API family.
    let refuse = |e: ApiError| kestrel_server::routes::error_for_path(parts.uri.path(), e);
    let bytes =
        match kestrel_server::extract::read_body(body, http.body_limit, http.body_read_timeout)
            .await
        {
            Ok(bytes) => bytes,
            Err(e) => return refuse(e),
        };
    let target = match named_model(&bytes) {
        Named::Model(name) => match shared
            .models
            .get(&name)
            .or_else(|| serving_adapter(shared, &name))
        {
            Some(served) => served,
            None => return refuse(ApiError::ModelNotFound(name)),
        },
        // The routes' own parsing gives the precise error (and no model runs).
        Named::NotJson => first.clone(),
        Named::Nothing => {
            return refuse(ApiError::param(
                "model",
                format!(
                    "this server serves {} models: name one in `model` (GET /v1/models lists them)",
                    models.len()
                ),
            ))
        }
    };
    answer(&target, Request::from_parts(parts, Body::from(bytes))).await
}

/// The served model whose live workers announce a LoRA adapter called `name` (a request
/// naming an adapter runs on its base model, as on `kestrel serve`).
fn serving_adapter(shared: &GatewayShared, name: &str) -> Option<Arc<Served>> {
    let view = shared.registry.view();
    let worker = view
        .serving_workers()
        .find(|w| w.adapters.iter().any(|a| a.name == name))?;
    shared.models.get(&worker.model.name)
}

async fn answer(served: &Served, req: Request) -> Response {
    match served.router.clone().oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// `/metrics`, the playground page, or 503 with `Retry-After`.
fn before_any_model(metrics: &PrometheusHandle, req: Request) -> Response {
    if req.uri().path() == "/metrics" {
        return kestrel_server::metrics::render_with(metrics, None).into_response();
    }
    // The playground page loads (and shows the 503s of the API) before the model is known.
    if let Some(page) = kestrel_server::routes::playground::respond(req.method(), req.uri().path())
    {
        return page;
    }
    OpenAiError(ApiError::Unavailable(
        "no inference worker has announced a model yet; retry later".into(),
    ))
    .into_response()
}
