//! The OpenAPI document lists the responses the server really gives (what schemathesis checks
//! against a running server in tests/python/run_schemathesis.sh): the API-key 401, the body
//! limits, overload and unavailability with `Retry-After`, and server-sent events.

use kestrel_server::routes::openapi::ApiDoc;
use serde_json::Value;
use utoipa::OpenApi;

fn doc() -> Value {
    serde_json::to_value(ApiDoc::openapi()).expect("the document serializes")
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
                // The API-key check answers before routing: always the OpenAI shape.
                assert_eq!(
                    error_schema(op, "401"),
                    "#/components/schemas/ErrorBody",
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
