//! The bounded hand-off between finished spans and the OTLP exporter: a
//! span is queued without waiting (or dropped and counted when the queue
//! is full), and one thread of its own sends the queue in batches, so a
//! slow or dead collector never holds a request.

use super::dropped;
use crate::config::{OtlpProtocol, TelemetryConfig};
use opentelemetry::Context;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Most spans in one export request.
const BATCH: usize = 512;

/// How long the first span of a batch waits for the ones finishing just
/// after it (a request's spans end within moments of each other).
const LINGER: Duration = Duration::from_millis(200);

/// The span processor: queues finished, sampled spans for the export thread.
#[derive(Debug)]
pub struct HandOff {
    spans: mpsc::Sender<SpanData>,
    /// Asks the export thread to send what is queued and stop; it answers
    /// when done.
    stop: Mutex<Option<oneshot::Sender<std::sync::mpsc::Sender<()>>>>,
}

impl HandOff {
    /// Builds the exporter for `endpoint` on a thread of its own (with its
    /// own single-threaded runtime, so exports never take the server's
    /// workers) and returns the processor feeding it.
    pub fn start(config: &TelemetryConfig, endpoint: &str) -> Result<Self, String> {
        let (spans, queue) = mpsc::channel(config.queue);
        let (stop, stopped) = oneshot::channel();
        let (built, ready) = std::sync::mpsc::channel();
        let config = config.clone();
        let endpoint = endpoint.to_string();
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = built.send(Err(e.to_string()));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match exporter(&config, &endpoint) {
                        Ok(exporter) => {
                            let _ = built.send(Ok(()));
                            run(exporter, queue, stopped, config.export_timeout).await;
                        }
                        Err(e) => {
                            let _ = built.send(Err(e));
                        }
                    }
                });
            })
            .map_err(|e| format!("starting the export thread: {e}"))?;
        ready
            .recv()
            .map_err(|_| "the export thread stopped".to_string())??;
        Ok(Self {
            spans,
            stop: Mutex::new(Some(stop)),
        })
    }
}

impl SpanProcessor for HandOff {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.spans.try_send(span).is_err() {
            dropped().inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let stop = self.stop.lock().ok().and_then(|mut s| s.take());
        let Some(stop) = stop else {
            return Err(OTelSdkError::AlreadyShutdown);
        };
        let (done, finished) = std::sync::mpsc::channel();
        if stop.send(done).is_err() {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        finished
            .recv_timeout(timeout)
            .map_err(|_| OTelSdkError::Timeout(timeout))
    }

    fn set_resource(&mut self, _resource: &Resource) {}
}

/// The OTLP exporter `config` names, sending to `endpoint`.
fn exporter(
    config: &TelemetryConfig,
    endpoint: &str,
) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let headers = config
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), value.expose().to_string()));
    let built = match config.protocol {
        OtlpProtocol::HttpProtobuf => {
            let url = if endpoint.trim_end_matches('/').ends_with("/v1/traces") {
                endpoint.to_string()
            } else {
                format!("{}/v1/traces", endpoint.trim_end_matches('/'))
            };
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(url)
                .with_timeout(config.export_timeout)
                .with_headers(headers.collect())
                .build()
        }
        OtlpProtocol::Grpc => {
            // Names and values were checked by the configuration's validation.
            let mut map = http::HeaderMap::new();
            for (name, value) in headers {
                let name = http::HeaderName::from_bytes(name.as_bytes());
                if let (Ok(name), Ok(value)) = (name, http::HeaderValue::from_str(&value)) {
                    map.insert(name, value);
                }
            }
            let metadata =
                opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(map);
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(config.export_timeout)
                .with_metadata(metadata)
                .build()
        }
    };
    let mut exporter = built.map_err(|e| e.to_string())?;
    exporter.set_resource(
        &Resource::builder()
            .with_service_name(config.service_name.clone())
            .build(),
    );
    Ok(exporter)
}

/// Sends the queue in batches until asked to stop, then sends what is
/// left and says so. Spans of a failed or timed-out export count as
/// dropped.
async fn run(
    exporter: opentelemetry_otlp::SpanExporter,
    mut queue: mpsc::Receiver<SpanData>,
    mut stop: oneshot::Receiver<std::sync::mpsc::Sender<()>>,
    timeout: Duration,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let done = loop {
        tokio::select! {
            done = &mut stop => break done.ok(),
            n = queue.recv_many(&mut batch, BATCH) => {
                if n == 0 {
                    break None;
                }
                tokio::time::sleep(LINGER).await;
                while batch.len() < BATCH {
                    match queue.try_recv() {
                        Ok(span) => batch.push(span),
                        Err(_) => break,
                    }
                }
                send(&exporter, &mut batch, timeout).await;
            }
        }
    };
    while let Ok(span) = queue.try_recv() {
        batch.push(span);
        if batch.len() == BATCH {
            send(&exporter, &mut batch, timeout).await;
        }
    }
    send(&exporter, &mut batch, timeout).await;
    let _ = exporter.shutdown();
    if let Some(done) = done {
        let _ = done.send(());
    }
}

/// Exports `batch` (emptying it), counting its spans dropped on failure.
async fn send(
    exporter: &opentelemetry_otlp::SpanExporter,
    batch: &mut Vec<SpanData>,
    timeout: Duration,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let n = spans.len() as u64;
    match tokio::time::timeout(timeout, exporter.export(spans)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            dropped().inc_by(n);
            tracing::debug!(%error, spans = n, "span export failed");
        }
        Err(_) => {
            dropped().inc_by(n);
            tracing::debug!(spans = n, "span export timed out");
        }
    }
}
