//! [`ErrorResponses`]: completes the generated OpenAPI document with the responses every route
//! can give besides its own (the API-key check, the body limits, overload, unavailability), in
//! the error shape of its API, and with the server-sent-event content of the streaming routes.
//!
//! | Route kind | Added (when missing) |
//! |---|---|
//! | every route but `/health*` and `/metrics` | 401 (the API-key check) |
//! | every `POST` | 400/422 (invalid body), 408 (body timeout), 413 (body or input too large) |
//! | generation routes | 404 (model or adapter), 429 (529 on Messages) and 503 with `Retry-After` |
//! | `/v1/messages/count_tokens` | 404 (model or adapter) |
//! | `/v1/embeddings` | 404 (model), 503 with `Retry-After` |
//! | LoRA routes | 400, 404, 409, 503 |
//!
//! TGI routes (`/`, `/generate`, `/generate_stream`, `/tokenize`) answer validation errors with
//! 422 and [`TgiErrorBody`](crate::tgi::wire::TgiErrorBody); the Messages routes with 400 and
//! [`AnthropicErrorBody`](crate::anthropic::wire::AnthropicErrorBody) (their 401 too); the
//! others with 400 and [`ErrorBody`](crate::openai::wire::ErrorBody).

use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{ObjectBuilder, Ref, Type};
use utoipa::openapi::{ContentBuilder, OpenApi, RefOr, Response, ResponseBuilder};
use utoipa::Modify;

/// Routes that answer without the API key.
const OPEN_ROUTES: &[&str] = &["/health", "/health/live", "/metrics"];
/// Routes with TGI's error shape and status codes.
const TGI_ROUTES: &[&str] = &["/", "/generate", "/generate_stream", "/tokenize"];
/// Routes that queue work on the engine.
const GENERATION_ROUTES: &[&str] = &[
    "/",
    "/generate",
    "/generate_stream",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/responses",
];
/// Routes whose `200` may be a stream of server-sent events.
const SSE_ROUTES: &[&str] = &[
    "/",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/responses",
];
const LORA_ROUTES: &[&str] = &["/v1/load_lora_adapter", "/v1/unload_lora_adapter"];

/// The [`Modify`] that adds the shared error responses (see the module docs).
pub struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let path = path.as_str();
            if let Some(op) = item.get.as_mut() {
                complete(path, false, op);
            }
            if let Some(op) = item.post.as_mut() {
                complete(path, true, op);
            }
            if let Some(op) = item.delete.as_mut() {
                complete(path, false, op);
            }
        }
    }
}

/// Adds the responses `path` can give to `op` (a `POST` when `post`).
fn complete(path: &str, post: bool, op: &mut Operation) {
    let tgi = TGI_ROUTES.contains(&path);
    let anthropic = crate::anthropic::owns_path(path);
    let shape = match (tgi, anthropic) {
        (true, _) => "TgiErrorBody",
        (_, true) => "AnthropicErrorBody",
        _ => "ErrorBody",
    };
    let mut add = |status: &str, description: &str, schema: &str, retry_after: bool| {
        let response = op
            .responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| RefOr::T(error_response(description, schema, retry_after)));
        // A status the handler's annotation already lists still gets the header.
        if let (RefOr::T(response), true) = (response, retry_after) {
            response
                .headers
                .entry("Retry-After".to_string())
                .or_insert_with(retry_after_header);
        }
    };
    if !OPEN_ROUTES.contains(&path) {
        add(
            "401",
            "Missing or wrong API key (when the server runs with one)",
            if anthropic { shape } else { "ErrorBody" },
            false,
        );
    }
    if post {
        let invalid = if tgi { "422" } else { "400" };
        add(invalid, "Malformed body or invalid parameter", shape, false);
        add(
            "408",
            "The request body did not arrive in time",
            shape,
            false,
        );
        add(
            "413",
            "The request body, or a text in it, is larger than the limit",
            shape,
            false,
        );
    }
    if GENERATION_ROUTES.contains(&path) || anthropic {
        add("404", "Unknown model or LoRA adapter", shape, false);
    }
    if anthropic && GENERATION_ROUTES.contains(&path) {
        add(
            "529",
            "Overloaded: too many requests in flight, or the queue is full",
            shape,
            true,
        );
        add(
            "503",
            "The engine cannot take or finish the request now (shutting down, queue timeout)",
            shape,
            true,
        );
    } else if GENERATION_ROUTES.contains(&path) {
        add("429", "Too many requests in flight", shape, true);
        add(
            "503",
            "The engine cannot take or finish the request now (shutting down, queue timeout)",
            shape,
            true,
        );
    }
    if path == "/v1/embeddings" {
        add("404", "Unknown model", shape, false);
        add("503", "The engine cannot take the request now", shape, true);
    }
    if LORA_ROUTES.contains(&path) {
        add(
            "404",
            "Unknown adapter, or run-time LoRA loading disabled",
            shape,
            false,
        );
        add(
            "409",
            "The adapter is in use or already loaded",
            shape,
            false,
        );
        add("503", "The engine cannot load adapters now", shape, true);
    }
    if path == "/generate_stream" {
        set_sse(path, op, true);
    } else if SSE_ROUTES.contains(&path) {
        set_sse(path, op, false);
    }
}

/// An error response with a body of component `schema`, and a `Retry-After` header if asked.
fn error_response(description: &str, schema: &str, retry_after: bool) -> Response {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name(schema)))
        .build();
    let mut builder = ResponseBuilder::new()
        .description(description)
        .content("application/json", content);
    if retry_after {
        builder = builder.header("Retry-After", retry_after_header());
    }
    builder.build()
}

/// `Retry-After`: whole seconds, at least 1.
fn retry_after_header() -> Header {
    let integer = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1))
        .build();
    HeaderBuilder::new()
        .schema(integer)
        .description(Some("Seconds to wait before retrying"))
        .build()
}

/// Declares the `200` of `op` as a `text/event-stream`: instead of its JSON body (`only`), or
/// besides it (a stream when the request asks for one). The schema describes one server-sent
/// event as SSE parsers (and OpenAPI 3.2's `itemSchema`) see it: a `data` string holding JSON
/// (the event type named in its description, or `[DONE]`), with optional `event`, `id` and
/// `retry` fields.
fn set_sse(path: &str, op: &mut Operation, only: bool) {
    let Some(RefOr::T(ok)) = op.responses.responses.get_mut("200") else {
        return;
    };
    let event_type = match only.then(|| ok.content.shift_remove("application/json")) {
        Some(Some(json)) => match json.schema {
            Some(RefOr::Ref(r)) => r.ref_location.rsplit('/').next().map(str::to_string),
            _ => None,
        },
        _ => None,
    };
    let data = match (event_type, crate::anthropic::owns_path(path)) {
        (Some(name), _) => format!("One JSON `{name}` (#/components/schemas/{name})"),
        (None, true) => "One JSON event of Anthropic's Messages stream, its `type` the event's \
            name: message_start, content_block_start, content_block_delta, content_block_stop, \
            message_delta, message_stop, ping or error"
            .to_string(),
        (None, false) => "One JSON chunk of the response, or `[DONE]` at the end".to_string(),
    };
    let string = |description: &str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
    };
    let event = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("One server-sent event"))
        .property("data", string(&data).content_media_type("application/json"))
        .property("event", string("The event type, if set"))
        .property("id", string("The event id, if set"))
        .property(
            "retry",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .description(Some("Reconnection time in ms, if set")),
        )
        .required("data")
        .build();
    let sse = ContentBuilder::new().schema(Some(event)).build();
    ok.content.insert("text/event-stream".to_string(), sse);
}
