//! `--otlp-traces-endpoint` (vLLM's name): where `serve`, `gateway` and `worker` export their
//! OpenTelemetry spans (see `kestrel_server::otel`).

use anyhow::Result;
use kestrel_server::otel::TraceExport;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// Export OpenTelemetry traces of each request over OTLP/HTTP (protobuf) to this
    /// collector, e.g. http://otel-collector:4318 (`/v1/traces` is appended when the URL has no
    /// path). A client's W3C `traceparent` header makes the request's spans part of its trace.
    /// Off when not given.
    #[arg(long, env = "KESTREL_OTLP_TRACES_ENDPOINT", value_name = "URL")]
    pub otlp_traces_endpoint: Option<String>,
}

impl TraceArgs {
    /// Starts exporting as `service` when an endpoint is given; keep the guard until exit (it
    /// flushes the last spans).
    pub fn install(&self, service: &str) -> Result<Option<TraceExport>> {
        let Some(endpoint) = self.otlp_traces_endpoint.as_deref() else {
            return Ok(None);
        };
        let export = kestrel_server::otel::install(endpoint, service)?;
        tracing::info!(endpoint, service, "exporting OpenTelemetry traces");
        Ok(Some(export))
    }
}
