//! [`install`]: the OTLP/HTTP span exporter behind `--otlp-traces-endpoint`, and the guard
//! that flushes it at exit.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;

/// How long finished spans wait before a batch is sent.
const EXPORT_DELAY: Duration = Duration::from_millis(500);
/// Spans kept waiting for export at most; more are dropped (never blocking a request).
const MAX_QUEUE: usize = 8192;

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("--otlp-traces-endpoint {0:?}: expected an http:// or https:// URL")]
    Endpoint(String),
    #[error("cannot build the OTLP span exporter: {0}")]
    Exporter(String),
    #[error("traces are already exported by this process")]
    AlreadyInstalled,
}

/// Flushes and stops the exporter when dropped (at the end of `main`).
pub struct TraceExport {
    provider: SdkTracerProvider,
}

impl Drop for TraceExport {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("flushing traces at exit: {e}");
        }
    }
}

/// Exports spans of this process as `service` to the OTLP/HTTP collector at `endpoint`
/// (`http://host:4318`, or the full `.../v1/traces` URL).
pub fn install(endpoint: &str, service: &str) -> Result<TraceExport, OtlpError> {
    let url = traces_url(endpoint)?;
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .build()
        .map_err(|e| OtlpError::Exporter(e.to_string()))?;
    let batch = BatchConfigBuilder::default()
        .with_scheduled_delay(EXPORT_DELAY)
        .with_max_queue_size(MAX_QUEUE)
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(
            BatchSpanProcessor::builder(exporter)
                .with_batch_config(batch)
                .build(),
        )
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_string())
                .build(),
        )
        .build();
    super::TRACER
        .set(provider.tracer("kestrel"))
        .map_err(|_| OtlpError::AlreadyInstalled)?;
    Ok(TraceExport { provider })
}

/// `endpoint`, with the OTLP traces path appended when it names no path.
fn traces_url(endpoint: &str) -> Result<String, OtlpError> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .filter(|rest| !rest.is_empty() && !rest.starts_with('/'))
        .ok_or_else(|| OtlpError::Endpoint(endpoint.to_string()))?;
    Ok(match rest.find('/') {
        Some(i) if rest[i..].len() > 1 => endpoint.to_string(),
        _ => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_endpoint_gets_the_traces_path() {
        let url = |e: &str| traces_url(e).expect("valid");
        assert_eq!(url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(url("https://c/v1/traces"), "https://c/v1/traces");
        assert_eq!(url("http://c:4318/custom"), "http://c:4318/custom");
    }

    #[test]
    fn refuses_what_is_not_an_http_url() {
        for bad in ["c:4318", "grpc://c:4317", "http://", "http:///x"] {
            assert!(traces_url(bad).is_err(), "{bad} accepted");
        }
    }
}
