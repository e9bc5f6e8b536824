//! [`ApiError`]: every way a request can fail, with a [`ErrorKind`] that decides the HTTP status,
//! the OpenAI `type` and the metric label. Routes return [`OpenAiError`] or [`TgiError`], which
//! render the same error in each API's body shape:
//!
//! ```text
//! OpenAI: {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": null,
//!                   "request_id": "..."}}
//! TGI:    {"error": "...", "error_type": "validation", "request_id": "..."}
//! ```
//!
//! Anthropic's shape is [`crate::anthropic::error::AnthropicError`].
//!
//! `request_id` is the request's [`crate::request_id::RequestId`] (also echoed in the
//! `X-Request-Id` header); it is left out only outside a request (e.g. in unit tests).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kestrel_engine::adapters::error::AdapterErrorKind;
use kestrel_engine::adapters::AdapterError;
use kestrel_engine::api::{EngineFailure, InvalidRequest, SubmitError};

use crate::openai::wire::{ErrorBody, ErrorDetail};
use crate::tgi::wire::TgiErrorBody;
use crate::unknown_fields::UnknownFields;

/// The class of an error: decides status code, OpenAI `type` and TGI `error_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or a parameter is out of range.
    InvalidRequest,
    /// Missing or wrong API key.
    Authentication,
    /// The model, LoRA adapter or route does not exist.
    NotFound,
    /// The route exists but does not take the request's method.
    MethodNotAllowed,
    /// The target is busy (a LoRA adapter that requests use).
    Conflict,
    /// The body exceeds the size limit.
    PayloadTooLarge,
    /// The client did not send its request in time.
    Timeout,
    /// Too many concurrent requests.
    Overloaded,
    /// The engine cannot take or finish the request now (shutting down, queue timeout).
    Unavailable,
    /// A bug or model failure.
    Internal,
}

impl ErrorKind {
    /// The HTTP status on OpenAI routes (TGI differs only for validation: 422).
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Authentication => StatusCode::UNAUTHORIZED,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Timeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI error `type`, also used as a metric and log label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::Conflict => "conflict_error",
            ErrorKind::PayloadTooLarge | ErrorKind::Timeout | ErrorKind::MethodNotAllowed => {
                "invalid_request_error"
            }
            ErrorKind::Overloaded => "rate_limit_error",
            ErrorKind::Unavailable => "service_unavailable",
            ErrorKind::Internal => "internal_error",
        }
    }

    /// TGI's `error_type`.
    fn tgi_type(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::PayloadTooLarge | ErrorKind::Timeout => {
                "validation"
            }
            ErrorKind::Authentication => "authentication",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "generation",
        }
    }
}

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// A parameter has a bad value; `param` is its wire name.
    #[error("{message}")]
    InvalidParam {
        param: &'static str,
        message: String,
    },
    /// The request is malformed in a way that is not about one parameter.
    #[error("{0}")]
    Invalid(String),
    /// The body is not valid JSON for this route.
    #[error("invalid JSON body: {0}")]
    Json(String),
    /// The body has fields the route does not know (refused only with `--strict-api`).
    #[error("unknown request field(s) {0} (the server runs with --strict-api)")]
    UnknownFields(UnknownFields),
    /// The body is not UTF-8.
    #[error("the request body is not valid UTF-8: {0}")]
    Utf8(String),
    /// The prompt (or prompt + max tokens) does not fit the configured limits.
    #[error("{0}")]
    TooLong(String),
    /// The client did not send the whole body in time.
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(std::time::Duration),
    /// A text to tokenize is longer than `--max-input-bytes`.
    #[error(
        "`{param}` is {len} bytes long, more than the limit of {limit} bytes (--max-input-bytes)"
    )]
    InputTooLarge {
        param: &'static str,
        len: usize,
        limit: usize,
    },
    /// The body is larger than the limit.
    #[error("the request body is larger than the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// The OpenAI `model` names neither the served model nor a loaded LoRA adapter.
    #[error(
        "The model `{0}` does not exist (neither the served model nor a loaded LoRA adapter)."
    )]
    ModelNotFound(String),
    /// A LoRA adapter operation was refused (not found, in use, invalid, no room).
    #[error(transparent)]
    Adapter(#[from] AdapterError),
    /// The route is not enabled.
    #[error("{0}")]
    NotFound(String),
    /// No stored response has this id (`param`: the field that named it, if a body field).
    #[error("Response with id '{id}' not found.")]
    ResponseNotFound {
        id: String,
        param: Option<&'static str>,
    },
    /// The path is served, but not for this method (the response's `Allow` header lists those
    /// that are).
    #[error("{method} is not allowed on {path}; the Allow header lists the methods it takes")]
    MethodNotAllowed { method: String, path: String },
    /// The Authorization header is missing or wrong.
    #[error(
        "missing or invalid API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`"
    )]
    Unauthorized,
    /// Too many requests in flight.
    #[error("the server is overloaded ({0} concurrent requests); retry later")]
    Overloaded(usize),
    /// The engine cannot serve the request.
    #[error("{0}")]
    Unavailable(String),
    /// The request conflicts with the server's state (e.g. unloading a model that is busy).
    #[error("{0}")]
    Conflict(String),
    /// The request's first-token objective cannot be met with the work queued ahead of it.
    #[error("{0}")]
    SloUnattainable(String),
    /// The fleet's queue holds `depth` requests, at or beyond its limit.
    #[error("the request queue is full ({depth} waiting, limit {limit}); retry later")]
    QueueFull { depth: usize, limit: usize },
    /// Something broke.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// Its class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ApiError::InvalidParam { .. }
            | ApiError::Invalid(_)
            | ApiError::Json(_)
            | ApiError::UnknownFields(_)
            | ApiError::Utf8(_)
            | ApiError::TooLong(_) => ErrorKind::InvalidRequest,
            ApiError::PayloadTooLarge(_) | ApiError::InputTooLarge { .. } => {
                ErrorKind::PayloadTooLarge
            }
            ApiError::Unauthorized => ErrorKind::Authentication,
            ApiError::BodyTimeout(_) => ErrorKind::Timeout,
            ApiError::ModelNotFound(_)
            | ApiError::NotFound(_)
            | ApiError::ResponseNotFound { .. } => ErrorKind::NotFound,
            ApiError::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
            ApiError::Adapter(e) => match e.kind() {
                AdapterErrorKind::Invalid => ErrorKind::InvalidRequest,
                AdapterErrorKind::NotFound => ErrorKind::NotFound,
                AdapterErrorKind::Conflict => ErrorKind::Conflict,
                AdapterErrorKind::Unavailable => ErrorKind::Unavailable,
            },
            ApiError::Overloaded(_) | ApiError::QueueFull { .. } | ApiError::SloUnattainable(_) => {
                ErrorKind::Overloaded
            }
            ApiError::Unavailable(_) => ErrorKind::Unavailable,
            ApiError::Conflict(_) => ErrorKind::Conflict,
            ApiError::Internal(_) => ErrorKind::Internal,
        }
    }

    /// A bad value for `param`.
    pub fn param(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::InvalidParam {
            param,
            message: message.into(),
        }
    }

    fn param_name(&self) -> Option<String> {
        match self {
            ApiError::InvalidParam { param, .. } | ApiError::InputTooLarge { param, .. } => {
                Some((*param).to_string())
            }
            ApiError::ModelNotFound(_) => Some("model".to_string()),
            ApiError::ResponseNotFound { param, .. } => param.map(str::to_string),
            ApiError::SloUnattainable(_) => Some("ttft_slo_ms".to_string()),
            ApiError::UnknownFields(u) => u.0.first().cloned(),
            _ => None,
        }
    }

    fn code(&self) -> Option<String> {
        match self {
            ApiError::Unauthorized => Some("invalid_api_key".into()),
            ApiError::ModelNotFound(_) => Some("model_not_found".into()),
            ApiError::TooLong(_) => Some("context_length_exceeded".into()),
            ApiError::Overloaded(_) => Some("overloaded".into()),
            ApiError::QueueFull { .. } => Some("queue_full".into()),
            ApiError::SloUnattainable(_) => Some("ttft_slo_unattainable".into()),
            _ => None,
        }
    }

    /// The OpenAI error body for this error, naming the current request's id.
    pub fn openai_body(&self) -> ErrorBody {
        self.openai_body_for(crate::request_id::current_string())
    }

    /// The OpenAI error body for this error, naming `request_id`.
    pub fn openai_body_for(&self, request_id: Option<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind: self.kind().as_str().to_string(),
                param: self.param_name(),
                code: self.code(),
                request_id,
            },
        }
    }

    /// The TGI error body for this error, naming `request_id`.
    pub fn tgi_body_for(&self, request_id: Option<String>) -> TgiErrorBody {
        TgiErrorBody {
            error: self.to_string(),
            error_type: self.kind().tgi_type().to_string(),
            request_id,
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        match e {
            SubmitError::Overloaded(limit) => ApiError::Overloaded(limit),
            SubmitError::Stopped => ApiError::Unavailable(e.to_string()),
        }
    }
}

impl From<EngineFailure> for ApiError {
    fn from(e: EngineFailure) -> ApiError {
        match e {
            EngineFailure::QueueTimeout(_)
            | EngineFailure::ShuttingDown
            | EngineFailure::Adapter(_) => ApiError::Unavailable(e.to_string()),
            EngineFailure::TooLong(_) => ApiError::TooLong(e.to_string()),
            EngineFailure::SloUnattainable { .. } => ApiError::SloUnattainable(e.to_string()),
            EngineFailure::Model(_) | EngineFailure::Internal(_) => {
                ApiError::Internal(e.to_string())
            }
        }
    }
}

impl From<InvalidRequest> for ApiError {
    fn from(e: InvalidRequest) -> ApiError {
        match e {
            InvalidRequest::TooLong { .. } => ApiError::TooLong(e.to_string()),
            e => ApiError::param(e.param(), e.to_string()),
        }
    }
}

/// An [`ApiError`] rendered in OpenAI's shape.
#[derive(Debug)]
pub struct OpenAiError(pub ApiError);

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        OpenAiError(e)
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let status = self.0.kind().status();
        with_retry_after(self.0.kind(), json_response(status, &self.0.openai_body()))
    }
}

/// Overload and unavailability are temporary: tell the client to retry in a second.
pub(crate) fn with_retry_after(kind: ErrorKind, mut response: Response) -> Response {
    if matches!(kind, ErrorKind::Overloaded | ErrorKind::Unavailable) {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    response
}

/// An [`ApiError`] rendered in TGI's shape (validation errors are 422 there).
#[derive(Debug)]
pub struct TgiError(pub ApiError);

impl From<ApiError> for TgiError {
    fn from(e: ApiError) -> Self {
        TgiError(e)
    }
}

impl IntoResponse for TgiError {
    fn into_response(self) -> Response {
        let kind = self.0.kind();
        let status = match kind {
            ErrorKind::InvalidRequest => StatusCode::UNPROCESSABLE_ENTITY,
            other => other.status(),
        };
        let body = self.0.tgi_body_for(crate::request_id::current_string());
        with_retry_after(kind, json_response(status, &body))
    }
}

/// A JSON response with `status`.
pub fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot serialize a response body");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// Without a route-specific shape, an error renders as OpenAI's.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        OpenAiError(self).into_response()
    }
}
