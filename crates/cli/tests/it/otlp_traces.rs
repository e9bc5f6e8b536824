//! OpenTelemetry traces against a real OTLP/HTTP receiver: an HTTP server in the test that
//! decodes each `ExportTraceServiceRequest` (protobuf) the processes send. A streamed chat
//! request with a client `traceparent`, through `kestrel serve` and through a gateway and a
//! worker on a real Redis, arrives as one trace: the client's trace id throughout, the
//! handler's span a child of the client's, every other span nested under it (parent ids), the
//! request id on the handler's span.

use crate::fleet_common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleet_common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::json;

const LONG: Duration = Duration::from_secs(180);
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const MAX_TOKENS: usize = 6;
const ROOT: &str = "POST /v1/chat/completions";
/// Slack for times converted between clocks (steady to wall, milliseconds across processes).
const SLACK_NS: u64 = 5_000_000;

/// A received span, as the checks need it.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    start: u64,
    end: u64,
    attrs: HashMap<String, String>,
}

/// The OTLP/HTTP receiver: every span of every export it was sent.
struct Receiver {
    addr: String,
    spans: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        let addr = listener.local_addr().unwrap().to_string();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let sink = spans.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let sink = sink.clone();
                std::thread::spawn(move || serve_exports(conn, &sink));
            }
        });
        Receiver { addr, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans of `trace_id` once `done` holds for them (polling up to a minute).
    fn wait(&self, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let mut got = Vec::new();
        wait_for(Duration::from_secs(60), "the spans of the trace", || {
            got = self.trace(TRACE_ID);
            done(&got)
        });
        got
    }

    fn trace(&self, trace_id: &str) -> Vec<Got> {
        let spans = self.spans.lock().unwrap();
        spans
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }
}

/// Answers the OTLP/HTTP exports on one keep-alive connection.
fn serve_exports(conn: TcpStream, sink: &Mutex<Vec<Got>>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clones"));
    let mut writer = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        assert!(
            line.starts_with("POST /v1/traces "),
            "unexpected request {line:?}"
        );
        let export = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP export");
        sink.lock().unwrap().extend(decode(export));
        let ok =
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if writer.write_all(ok.as_bytes()).is_err() {
            return;
        }
    }
}

fn decode(export: ExportTraceServiceRequest) -> Vec<Got> {
    let mut out = Vec::new();
    for rs in export.resource_spans {
        let service = rs
            .resource
            .map(|r| attributes(&r.attributes))
            .and_then(|a| a.get("service.name").cloned())
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Got {
                    service: service.clone(),
                    name: s.name,
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    start: s.start_time_unix_nano,
                    end: s.end_time_unix_nano,
                    attrs: attributes(&s.attributes),
                });
            }
        }
    }
    out
}

fn attributes(kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn named<'a>(spans: &'a [Got], name: &str) -> Vec<&'a Got> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Got], name: &str) -> &'a Got {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name:?} span expected in {spans:#?}");
    found[0]
}

/// Sends the streamed chat request with the client's trace context; returns its SSE body.
fn streamed_chat(addr: &str, request_id: &str) -> String {
    let body = json!({
        "messages": [{"role": "user", "content": "Name three birds of prey."}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "ignore_eos": true,
        "stream": true,
    });
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let headers = [
        ("traceparent", traceparent.as_str()),
        ("X-Request-Id", request_id),
    ];
    let r = request_with(
        addr,
        "POST",
        "/v1/chat/completions",
        &headers,
        &body.to_string(),
        LONG,
    )
    .expect("answers");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("data: [DONE]"), "{}", r.body);
    r.body
}

/// The handler's span: a child of the client's span, named after the route, with the request
/// id. Every span of the trace starts within it, and the spans of its own process end within it
/// (a worker may still acknowledge its job after the client has its answer).
fn check_root<'a>(spans: &'a [Got], request_id: &str) -> &'a Got {
    let root = one(spans, ROOT);
    assert_eq!(
        root.parent, CLIENT_SPAN,
        "the handler's span continues the client's"
    );
    assert_eq!(
        root.attrs.get("kestrel.request_id").map(String::as_str),
        Some(request_id)
    );
    assert_eq!(
        root.attrs
            .get("http.response.status_code")
            .map(String::as_str),
        Some("200")
    );
    for s in spans {
        assert_eq!(s.trace_id, TRACE_ID);
        assert!(s.start <= s.end, "{s:?} ends before it starts");
        assert!(
            s.start + SLACK_NS >= root.start && s.start <= root.end,
            "{s:?} starts outside the handler's span {root:?}"
        );
        if s.service == root.service {
            assert!(
                s.end <= root.end + SLACK_NS,
                "{s:?} ends after the handler's span {root:?}"
            );
        }
    }
    root
}

/// Engine step spans under `parent`: at least one prefill chunk and a decode step per token
/// after the first.
fn check_steps(spans: &[Got], parent: &Got) {
    let prefill = named(spans, "prefill");
    let decode = named(spans, "decode");
    assert!(!prefill.is_empty(), "no prefill span in {spans:#?}");
    assert_eq!(
        decode.len(),
        MAX_TOKENS - 1,
        "one decode span per token after the first"
    );
    for s in prefill.iter().chain(&decode) {
        assert_eq!(
            s.parent, parent.span_id,
            "{s:?} is not nested in {}",
            parent.name
        );
        assert_eq!(s.service, parent.service);
    }
    let last_prefill = prefill.iter().map(|s| s.end).max().unwrap();
    assert!(
        decode.iter().all(|d| d.start + SLACK_NS >= last_prefill),
        "decoding starts after prefill"
    );
}

#[test]
fn a_streamed_chat_request_through_serve_is_one_nested_trace() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let (_serve, addr) = serve(&["--otlp-traces-endpoint", &endpoint]);
    wait_healthy(&addr, LONG);
    streamed_chat(&addr, "trace-serve-1");

    let spans = receiver.wait(|s| {
        named(s, ROOT).len() == 1
            && named(s, "stream").len() == 1
            && named(s, "decode").len() >= MAX_TOKENS - 1
    });
    let root = check_root(&spans, "trace-serve-1");
    assert_eq!(root.service, "kestrel-serve");
    for name in ["validate", "queue", "stream"] {
        assert_eq!(
            one(&spans, name).parent,
            root.span_id,
            "{name} is nested in the handler's span"
        );
    }
    check_steps(&spans, root);
    assert!(
        receiver
            .spans
            .lock()
            .unwrap()
            .iter()
            .all(|s| !s.name.starts_with("GET /health")),
        "health checks are not traced"
    );
}

#[test]
fn a_streamed_chat_request_through_a_gateway_and_worker_is_one_nested_trace() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let redis = Redis::start();
    let (_gw, addr) = gateway(&redis, &["--otlp-traces-endpoint", &endpoint]);
    let _w = worker(&redis, "w-trace", &["--otlp-traces-endpoint", &endpoint]);
    wait_workers(&addr, 1, LONG);
    streamed_chat(&addr, "trace-fleet-1");

    let spans = receiver.wait(|s| {
        named(s, ROOT).len() == 1
            && named(s, "stream").len() == 1
            && named(s, "worker job").len() == 1
            && named(s, "decode").len() >= MAX_TOKENS - 1
    });
    let root = check_root(&spans, "trace-fleet-1");
    assert_eq!(root.service, "kestrel-gateway");
    for name in ["validate", "queue", "stream"] {
        let s = one(&spans, name);
        assert_eq!(
            s.parent, root.span_id,
            "{name} is nested in the handler's span"
        );
        assert_eq!(s.service, "kestrel-gateway");
    }
    let job = one(&spans, "worker job");
    assert_eq!(job.service, "kestrel-worker");
    assert_eq!(
        job.parent, root.span_id,
        "the worker's span continues the gateway's"
    );
    assert_eq!(
        job.attrs.get("kestrel.request_id").map(String::as_str),
        Some("trace-fleet-1")
    );
    let waited = one(&spans, "redis queue");
    assert_eq!(waited.parent, job.span_id);
    assert_eq!(waited.service, "kestrel-worker");
    check_steps(&spans, job);
}
