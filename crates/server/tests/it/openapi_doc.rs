//! The OpenAPI document lists the responses the server really gives (what schemathesis checks
//! against a running server in tests/python/run_schemathesis.sh): the API-key 401, the body
//! limits, overload and unavailability with `Retry-After`, and server-sent events; and the
//! parameter ranges it states are the ones the server enforces.

use kestrel_server::routes::openapi::document;
use kestrel_server::validation::param_ranges;
use serde_json::{json, Value};

use crate::common;

fn doc() -> Value {
    document(0)
}

fn op<'a>(doc: &'a Value, path: &str, method: &str) -> &'a Value {
    let op = &doc["paths"][path][method];
    assert!(op.is_object(), "{method} {path} is documented");
    op
}

fn statuses(op: &Value) -> Vec<String> {
    op["responses"]
        .as_object()
        .expect("responses")
        .keys()
        .cloned()
        .collect()
}

fn error_schema(op: &Value, status: &str) -> String {
    op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        .as_str()
        .unwrap_or_else(|| panic!("{status} has a JSON body: {op}"))
        .to_string()
}

#[test]
fn every_protected_operation_documents_401_and_open_ones_do_not() {
    let doc = doc();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let has_401 = statuses(op).iter().any(|s| s == "401");
            let open = ["/health", "/health/live", "/metrics"].contains(&path.as_str());
            assert_eq!(has_401, !open, "401 on {method} {path}");
            if has_401 {
                // The API-key check answers before routing: the OpenAI shape, but Anthropic's
                // on the Messages routes.
                let shape = match path.starts_with("/v1/messages") {
                    true => "AnthropicErrorBody",
                    false => "ErrorBody",
                };
                assert_eq!(
                    error_schema(op, "401"),
                    format!("#/components/schemas/{shape}"),
                    "{path}"
                );
            }
        }
    }
}

#[test]
fn posts_document_body_errors_in_their_api_shape() {
    let doc = doc();
    for (path, invalid, shape) in [
        ("/v1/completions", "400", "ErrorBody"),
        ("/v1/chat/completions", "400", "ErrorBody"),
        ("/v1/embeddings", "400", "ErrorBody"),
        ("/v1/load_lora_adapter", "400", "ErrorBody"),
        ("/v1/unload_lora_adapter", "400", "ErrorBody"),
        ("/generate", "422", "TgiErrorBody"),
        ("/generate_stream", "422", "TgiErrorBody"),
        ("/", "422", "TgiErrorBody"),
        ("/tokenize", "422", "TgiErrorBody"),
        ("/v1/messages", "400", "AnthropicErrorBody"),
        ("/v1/messages/count_tokens", "400", "AnthropicErrorBody"),
    ] {
        let op = op(&doc, path, "post");
        for status in [invalid, "408", "413"] {
            assert_eq!(
                error_schema(op, status),
                format!("#/components/schemas/{shape}"),
                "{status} on {path}"
            );
        }
    }
}

#[test]
fn generation_routes_document_404_429_and_503_with_retry_after() {
    let doc = doc();
    for path in [
        "/v1/completions",
        "/v1/chat/completions",
        "/generate",
        "/generate_stream",
        "/",
    ] {
        let op = op(&doc, path, "post");
        let got = statuses(op);
        for status in ["404", "429", "503"] {
            assert!(
                got.iter().any(|s| s == status),
                "{status} on {path}: {got:?}"
            );
        }
        for status in ["429", "503"] {
            let header = &op["responses"][status]["headers"]["Retry-After"];
            assert_eq!(header["schema"]["type"], "integer", "{status} on {path}");
        }
    }
}

#[test]
fn messages_documents_404_529_and_503_with_retry_after_in_anthropics_shape() {
    let doc = doc();
    let op = op(&doc, "/v1/messages", "post");
    let got = statuses(op);
    for status in ["400", "401", "404", "413", "503", "529"] {
        assert!(got.iter().any(|s| s == status), "{status}: {got:?}");
        assert_eq!(
            error_schema(op, status),
            "#/components/schemas/AnthropicErrorBody",
            "{status}"
        );
    }
    assert!(
        !got.iter().any(|s| s == "429"),
        "overload is 529 here: {got:?}"
    );
    for status in ["529", "503"] {
        let header = &op["responses"][status]["headers"]["Retry-After"];
        assert_eq!(header["schema"]["type"], "integer", "{status}");
    }
    let ok = op["responses"]["200"]["content"].as_object().expect("200");
    assert!(ok.contains_key("text/event-stream") && ok.contains_key("application/json"));
    let count = statuses(op_of(&doc, "/v1/messages/count_tokens"));
    assert!(count.iter().any(|s| s == "404"), "{count:?}");
}

fn op_of<'a>(doc: &'a Value, path: &str) -> &'a Value {
    op(doc, path, "post")
}

#[test]
fn streaming_routes_document_event_streams() {
    let doc = doc();
    let content = |path: &str| -> Vec<String> {
        op(&doc, path, "post")["responses"]["200"]["content"]
            .as_object()
            .expect("200 content")
            .keys()
            .cloned()
            .collect()
    };
    assert_eq!(content("/generate_stream"), ["text/event-stream"]);
    // Each event is an SSE record whose `data` is the JSON event type, which is named.
    let event = &op(&doc, "/generate_stream", "post")["responses"]["200"]["content"]
        ["text/event-stream"]["schema"];
    assert_eq!(event["required"], serde_json::json!(["data"]), "{event}");
    let data = &event["properties"]["data"];
    assert_eq!(data["contentMediaType"], "application/json", "{event}");
    assert!(
        data["description"]
            .as_str()
            .is_some_and(|d| d.contains("StreamResponse")),
        "{event}"
    );
    for path in ["/v1/completions", "/v1/chat/completions", "/"] {
        assert_eq!(
            content(path),
            ["application/json", "text/event-stream"],
            "{path}"
        );
    }
    assert_eq!(content("/generate"), ["application/json"]);
}

#[test]
fn every_parameter_range_lands_on_a_documented_property() {
    let mut doc = document(-5);
    assert_eq!(param_ranges::annotate(&mut doc, -5), Vec::<String>::new());
    let priority = &doc["components"]["schemas"]["GenerateParameters"]["properties"]["priority"];
    assert_eq!(priority["minimum"], json!(-5), "{priority}");
    let temperature =
        &doc["components"]["schemas"]["CompletionRequest"]["properties"]["temperature"];
    assert_eq!(
        (&temperature["minimum"], &temperature["maximum"]),
        (&json!(0), &json!(2))
    );
    let top_p = &doc["components"]["schemas"]["GenerateParameters"]["properties"]["top_p"];
    assert_eq!(top_p["exclusiveMinimum"], json!(0), "{top_p}");
    let stop = doc["components"]["schemas"]["StopSequences"].to_string();
    assert!(stop.contains(r#""maxItems":16"#), "{stop}");
}

/// Where a body schema is posted, the base body it is added to and its validation status.
fn route_of(schema: &str) -> Option<(&'static str, Value, u16)> {
    match schema {
        "CompletionRequest" => Some((
            "/v1/completions",
            json!({"prompt": "Hi", "max_tokens": 1}),
            400,
        )),
        "ChatCompletionRequest" => Some((
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}),
            400,
        )),
        "MessagesRequest" => Some((
            "/v1/messages",
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}),
            400,
        )),
        "GenerateParameters" => Some((
            "/generate",
            json!({"inputs": "Hi", "parameters": {"max_new_tokens": 1}}),
            422,
        )),
        _ => None,
    }
}

/// `body` with `property` set to `value` (in `parameters` for TGI).
fn with(body: &Value, property: &str, value: Value) -> Value {
    let mut body = body.clone();
    let target = match body.get_mut("parameters") {
        Some(p) => p,
        None => &mut body,
    };
    target[property] = value;
    if property == "top_logprobs" {
        target["logprobs"] = json!(true);
    }
    body
}

async fn served_document() -> Value {
    let text = common::client()
        .get(format!("{}/openapi.json", common::main_server().base))
        .send()
        .await
        .expect("GET /openapi.json")
        .text()
        .await
        .expect("a body");
    serde_json::from_str(&text).expect("JSON")
}

async fn status_of(path: &str, body: &Value) -> (u16, String) {
    let resp = common::client()
        .post(format!("{}{path}", common::main_server().base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

/// The values just inside and just outside each documented bound of `schema` (a property's
/// schema in the served document), for an integer or a number.
fn probes(schema: &Value) -> (Vec<Value>, Vec<Value>) {
    let integer = schema["type"].to_string().contains("integer");
    let step = if integer { 1.0 } else { 0.01 };
    let value = |v: f64| if integer { json!(v as i64) } else { json!(v) };
    let (mut inside, mut outside) = (Vec::new(), Vec::new());
    if let Some(lo) = schema["minimum"].as_f64() {
        inside.push(value(lo));
        outside.push(value(lo - step));
    }
    if let Some(lo) = schema["exclusiveMinimum"].as_f64() {
        inside.push(value(lo + if integer { 1.0 } else { 0.001 }));
        outside.push(value(lo));
    }
    if let Some(hi) = schema["maximum"].as_f64() {
        inside.push(value(hi));
        outside.push(value(hi + step));
    }
    (inside, outside)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_ranges_are_what_the_server_enforces() {
    let served = served_document().await;
    let mut checked = 0;
    // The shared server runs with the default `--min-client-priority`.
    let min_priority = common::options(64).min_client_priority;
    for d in param_ranges::documented(min_priority) {
        let (path, base, invalid) = route_of(d.schema).expect("a routed schema");
        let mut schema = &served["components"]["schemas"][d.schema]["properties"][d.property];
        if d.items {
            schema = &schema["items"];
        }
        let (inside, outside) = probes(schema);
        assert!(!inside.is_empty(), "{}.{}: {schema}", d.schema, d.property);
        let wrap = |v: Value| if d.items { json!([v]) } else { v };
        for v in inside {
            let (status, text) = status_of(path, &with(&base, d.property, wrap(v.clone()))).await;
            // A 1 ms first-token objective may be refused as unattainable: that is admission,
            // not validation.
            let slo_refusal = status == 429 && text.contains("objective of 1 ms cannot be met");
            assert!(
                status == 200 || slo_refusal,
                "{} {}={v} is documented as valid: {status} {text}",
                d.schema,
                d.property
            );
        }
        for v in outside {
            let (status, text) = status_of(path, &with(&base, d.property, wrap(v.clone()))).await;
            assert_eq!(
                status, invalid,
                "{} {}={v} is documented as invalid: {text}",
                d.schema, d.property
            );
            assert!(
                text.contains(d.property),
                "the error names {}: {text}",
                d.property
            );
        }
        checked += 1;
    }
    assert!(checked >= 40, "{checked} ranges checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_stop_limits_are_what_the_server_enforces() {
    let served = served_document().await;
    let variants = served["components"]["schemas"]["StopSequences"]["oneOf"]
        .as_array()
        .expect("oneOf");
    let list = variants
        .iter()
        .find(|v| v["type"] == "array")
        .expect("a list");
    let max_items = list["maxItems"].as_u64().expect("maxItems") as usize;
    let max_len = list["items"]["maxLength"].as_u64().expect("maxLength") as usize;
    assert_eq!(list["items"]["minLength"], 1);
    let (path, base, invalid) = route_of("CompletionRequest").unwrap();
    let stop = |v: Value| with(&base, "stop", v);
    let many = |n: usize| json!(vec!["zq"; n]);
    for (value, ok) in [
        (many(max_items), true),
        (many(max_items + 1), false),
        (json!("x".repeat(max_len)), true),
        (json!("x".repeat(max_len + 1)), false),
        (json!(["x".repeat(max_len + 1)]), false),
        (json!(""), false),
        (json!([""]), false),
    ] {
        let (status, text) = status_of(path, &stop(value)).await;
        let expected = if ok { 200 } else { invalid };
        assert_eq!(status, expected, "{text}");
    }
    let messages =
        &served["components"]["schemas"]["ChatCompletionRequest"]["properties"]["messages"];
    assert_eq!(messages["minItems"], 1, "{messages}");
    let (path, base, invalid) = route_of("ChatCompletionRequest").unwrap();
    let (status, text) = status_of(path, &with(&base, "messages", json!([]))).await;
    assert_eq!(status, invalid, "{text}");
}

#[test]
fn prompt_logprobs_are_documented_with_a_null_first_entry() {
    let doc = doc();
    for schema in ["ChatCompletionResponse", "CompletionChoice"] {
        let items = &doc["components"]["schemas"][schema]["properties"]["prompt_logprobs"]["items"];
        assert!(items.to_string().contains("null"), "{schema}: {items}");
    }
}

/// Every wire type with a schema, as the document reaches them: the routes' bodies.
fn body_schemas() -> Vec<(
    String,
    utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
)> {
    use kestrel_server::{anthropic, openai, responses, tgi};
    use utoipa::ToSchema;
    fn add<T: ToSchema>(
        all: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        all.push((T::name().into_owned(), T::schema()));
        T::schemas(all);
    }
    let mut all = Vec::new();
    add::<openai::wire::ChatCompletionRequest>(&mut all);
    add::<openai::wire::ChatCompletionResponse>(&mut all);
    add::<openai::wire::CompletionRequest>(&mut all);
    add::<openai::wire::CompletionResponse>(&mut all);
    add::<openai::wire::ModelList>(&mut all);
    add::<openai::wire::ErrorBody>(&mut all);
    add::<openai::wire::embedding::EmbeddingRequest>(&mut all);
    add::<openai::wire::embedding::EmbeddingResponse>(&mut all);
    add::<openai::detokenize::DetokenizeRequest>(&mut all);
    add::<openai::detokenize::DetokenizeResponse>(&mut all);
    add::<anthropic::wire::MessagesRequest>(&mut all);
    add::<anthropic::wire::MessageResponse>(&mut all);
    add::<anthropic::wire::CountTokensRequest>(&mut all);
    add::<anthropic::wire::CountTokensResponse>(&mut all);
    add::<responses::wire::ResponsesRequest>(&mut all);
    add::<responses::wire::ResponseObject>(&mut all);
    add::<responses::wire::DeletedResponse>(&mut all);
    add::<tgi::wire::GenerateRequest>(&mut all);
    add::<tgi::wire::GenerateResponse>(&mut all);
    add::<tgi::wire::StreamResponse>(&mut all);
    add::<tgi::wire::TokenizeRequest>(&mut all);
    add::<tgi::wire::Info>(&mut all);
    add::<tgi::wire::TgiErrorBody>(&mut all);
    all
}

/// Schemas are keyed by the type's name, so two wire types of one name (say, the chat and the
/// Responses API's `ContentPart`) would leave one of them described as the other.
#[test]
fn no_two_wire_types_share_a_schema_name() {
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    for (name, schema) in body_schemas() {
        let json = serde_json::to_string(&schema).expect("schema serializes");
        if let Some(earlier) = seen.insert(name.clone(), json.clone()) {
            assert_eq!(earlier, json, "two different wire types are named {name}");
        }
    }
    let documented = doc()["components"]["schemas"]
        .as_object()
        .expect("schemas")
        .len();
    assert!(
        seen.len() <= documented,
        "{} body schemas, {documented} documented",
        seen.len()
    );
}
