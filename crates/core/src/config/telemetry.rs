//! `[telemetry]`: OpenTelemetry traces over OTLP (docs/telemetry.md).

use super::Secret;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// `[telemetry]`: where foldgate sends its traces. Off unless `endpoint`
/// is set (here or by `OTEL_EXPORTER_OTLP_ENDPOINT`); off, no tracing
/// layer is installed at all.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP address, e.g. `http://127.0.0.1:4318` for
    /// `http/protobuf` (foldgate posts to its `/v1/traces` unless the
    /// address already ends so) or `http://127.0.0.1:4317` for `grpc`.
    /// Plain `http://` only.
    pub endpoint: Option<String>,
    /// `"http/protobuf"` or `"grpc"`.
    pub protocol: OtlpProtocol,
    /// Headers sent with every export (e.g. a collector's API key);
    /// printed as `****`.
    pub headers: BTreeMap<String, Secret>,
    /// The share of new traces recorded, 0.0 to 1.0. A request whose
    /// client sent a `traceparent` follows the client's sampled flag.
    pub sampling_ratio: f64,
    /// `service.name` of every span.
    pub service_name: String,
    /// Most finished spans waiting for export; a span finishing when the
    /// queue is full is dropped and counted in
    /// `foldgate_telemetry_spans_dropped_total` (a request never waits).
    pub queue: usize,
    /// Longest one export may take before its spans count as dropped.
    #[serde(with = "humantime_serde")]
    pub export_timeout: Duration,
    /// Trace `/foldgate/health` and `/foldgate/metrics` requests too. Off
    /// (default): behind a liveness probe or a scraper they would be most
    /// of the traces, and say nothing about conversations.
    pub trace_probes: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: OtlpProtocol::default(),
            headers: BTreeMap::new(),
            sampling_ratio: 1.0,
            service_name: "foldgate".into(),
            queue: 2048,
            export_timeout: Duration::from_secs(10),
            trace_probes: false,
        }
    }
}

/// `telemetry.protocol`: OTLP's two encodings foldgate sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP/1.1 `POST {endpoint}/v1/traces` (port 4318).
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// gRPC `TraceService/Export` (port 4317).
    #[serde(rename = "grpc")]
    Grpc,
}

impl TelemetryConfig {
    /// Checks what the types cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(format!(
                "telemetry.sampling_ratio must be in 0.0..=1.0, got {}",
                self.sampling_ratio
            ));
        }
        if self.queue == 0 {
            return Err("telemetry.queue must be above 0".into());
        }
        if self.service_name.is_empty() {
            return Err("telemetry.service_name must not be empty".into());
        }
        if let Some(endpoint) = &self.endpoint {
            let uri: http::Uri = endpoint
                .parse()
                .map_err(|e| format!("telemetry.endpoint: {e}"))?;
            if uri.scheme_str() != Some("http") || uri.authority().is_none() {
                return Err(format!(
                    "telemetry.endpoint must be an absolute http:// URL, got {endpoint:?}"
                ));
            }
        }
        for (name, value) in &self.headers {
            http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("telemetry.headers: {name:?} is not a header name"))?;
            http::HeaderValue::from_str(value.expose())
                .map_err(|_| format!("telemetry.headers.{name}: not a header value"))?;
        }
        Ok(())
    }
}
