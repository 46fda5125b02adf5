//! OpenTelemetry traces over OTLP (`[telemetry]`, docs/telemetry.md): the
//! `tracing-opentelemetry` layer `main` installs when an endpoint is set,
//! the spans the request path opens under its `request` span, and W3C
//! `traceparent` in and out.
//!
//! Off (no endpoint), no layer is installed and every function here
//! returns at its first branch: [`enabled`] is one relaxed atomic load.

mod export;

use crate::config::TelemetryConfig;
use http::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use prometheus_client::metrics::counter::Counter;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::registry::LookupSpan;

/// The target of the spans only traces show (fold, summarizer call,
/// recall round, upstream call): the log's layer leaves them out, so a
/// log line's span stays the request's (its id).
pub const TARGET: &str = "foldgate::otel";

/// The target of a traced request's span, which the log shows too; an
/// untraced request's span has its usual target, which the traces' layer
/// never sees.
pub const REQUEST_TARGET: &str = "foldgate::traced";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// `telemetry.sampling_ratio`, as `f64` bits.
static RATIO: AtomicU64 = AtomicU64::new(0);

/// Whether traces are being recorded (a layer is installed).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether the traces' layer takes a span of this metadata: a traced
/// request's and the spans under it, nothing else (no event, no other
/// crate's span).
pub fn traces(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.is_span() && matches!(metadata.target(), TARGET | REQUEST_TARGET)
}

/// Whether a request with these headers is traced, decided once, as it
/// arrives (parent-based): a client's `traceparent` by its sampled flag,
/// else `telemetry.sampling_ratio`. An untraced request makes no span the
/// traces see, so sampling 0 costs the request path next to nothing.
pub fn traced(headers: &HeaderMap) -> bool {
    if !enabled() {
        return false;
    }
    match headers
        .get("traceparent")
        .and_then(|v| sampled_flag(v.as_bytes()))
    {
        Some(sampled) => sampled,
        None => crate::random::unit() < f64::from_bits(RATIO.load(Ordering::Relaxed)),
    }
}

/// The sampled flag of a W3C `traceparent` (`00-{trace}-{span}-{flags}`),
/// `None` when it is not one.
fn sampled_flag(value: &[u8]) -> Option<bool> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !(hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2)) || version == "ff" {
        return None;
    }
    Some(u8::from_str_radix(flags, 16).ok()? & 1 == 1)
}

/// Whether `span` belongs to a traced request (it is its span, or one
/// under it).
fn is_traced(span: &Span) -> bool {
    span.metadata().is_some_and(traces)
}

/// Finished spans that never reached the collector: the export queue was
/// full, or their export failed or timed out
/// (`foldgate_telemetry_spans_dropped_total`).
pub fn dropped() -> &'static Counter {
    static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);
    &DROPPED
}

/// Traces being exported: shut it down at exit to send what is queued.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Sends the spans still queued (waiting at most the export timeout)
    /// and stops the export thread.
    pub fn shutdown(&self) {
        // At exit, with nowhere left to say so.
        let _unsent = self.provider.shutdown();
    }
}

/// Why traces could not start.
#[derive(Debug, thiserror::Error)]
#[error("telemetry: {0}")]
pub struct TelemetryError(String);

/// The layer that turns `tracing` spans into OpenTelemetry spans and
/// exports them per `config`, or `None` when `config` sets no endpoint.
/// Starts the export thread; marks telemetry [`enabled`].
pub fn layer<S>(
    config: &TelemetryConfig,
) -> Result<Option<(impl tracing_subscriber::Layer<S>, Telemetry)>, TelemetryError>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(endpoint) = config.endpoint.as_deref() else {
        return Ok(None);
    };
    let processor = export::HandOff::start(config, endpoint).map_err(TelemetryError)?;
    // Which requests are traced is decided as they arrive ([`traced`]):
    // every span the layer sees is recorded.
    let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
    let resource = Resource::builder()
        .with_service_name(config.service_name.clone())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_resource(resource)
        .with_span_processor(processor)
        .build();
    let tracer = provider.tracer("foldgate");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false);
    RATIO.store(config.sampling_ratio.to_bits(), Ordering::Relaxed);
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some((layer, Telemetry { provider })))
}

/// Makes `span` (a traced request's, just made) the child of the
/// client's `traceparent`, when it sent one; without one the request
/// starts a trace.
pub fn set_parent_from(span: &Span, headers: &HeaderMap) {
    if !enabled() || !headers.contains_key("traceparent") {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    // Only fails when the span is disabled or already started: then it
    // has no trace to join.
    let _ = span.set_parent(parent);
}

/// Sets `traceparent` (and `tracestate`) on an outgoing request to name
/// `span` as its parent, replacing the client's; an untraced request's
/// call keeps the client's as it came.
pub fn inject(span: &Span, headers: &mut HeaderMap) {
    if !enabled() || !is_traced(span) {
        return;
    }
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeadersMut(headers));
}

/// A span only traces show, under `parent`, or a disabled one when
/// `parent` is not a traced request's (or telemetry is off).
fn child_of(parent: &Span, make: impl FnOnce() -> Span) -> Span {
    if is_traced(parent) {
        make()
    } else {
        Span::none()
    }
}

/// [`child_of`] the current span.
fn child(make: impl FnOnce() -> Span) -> Span {
    if enabled() {
        child_of(&Span::current(), make)
    } else {
        Span::none()
    }
}

/// The span of a fold, a child of `parent` (the request's); `started` is
/// `inline` (the request waits) or `background`.
pub fn fold(parent: &Span, started: &'static str) -> Span {
    child(
        || tracing::info_span!(target: TARGET, parent: parent, "fold", foldgate.fold.started = started),
    )
}

/// The span of one summarizer call to `model` over an API's wire format
/// (its name and its provider's, as [`crate::api::WireApi`] gives them).
pub fn summarizer_call(api: &str, api_provider: &'static str, model: &str) -> Span {
    child(|| {
        tracing::info_span!(
            target: TARGET,
            "summarizer call",
            otel.kind = "client",
            gen_ai.operation.name = operation(api),
            gen_ai.provider.name = provider(api_provider),
            gen_ai.request.model = model,
        )
    })
}

/// The span of recall round `round` (from 1), answering `calls` calls;
/// also sets the rounds so far on the current (the request's) span.
pub fn recall_round(round: u32, calls: usize) -> Span {
    child(|| {
        Span::current().set_attribute("foldgate.recall.rounds", i64::from(round));
        tracing::info_span!(
            target: TARGET,
            "recall round",
            foldgate.recall.round = round,
            foldgate.recall.calls = calls,
        )
    })
}

/// The span of one call upstream to `provider` (its configured name).
pub fn upstream(provider: &str) -> Span {
    child(
        || tracing::info_span!(target: TARGET, "upstream call", otel.kind = "client", foldgate.provider = provider),
    )
}

/// Records the HTTP status an outgoing call got on its span.
pub fn record_status(span: &Span, status: http::StatusCode) {
    if enabled() && is_traced(span) {
        span.set_attribute("http.response.status_code", i64::from(status.as_u16()));
    }
}

/// Sets the GenAI semantic conventions' attributes and foldgate's
/// conversation on the current (the request's) span: the request's API
/// and its provider by name (as [`crate::api::WireApi`] gives them), the
/// model asked for, and the conversation's key (tenant, id), exported only
/// hashed.
pub fn record_request(
    api: &'static str,
    api_provider: &'static str,
    model: &str,
    conversation: Option<(&str, &str)>,
) {
    if !enabled() {
        return;
    }
    let span = Span::current();
    if !is_traced(&span) {
        return;
    }
    span.set_attribute("gen_ai.operation.name", operation(api));
    span.set_attribute("gen_ai.provider.name", provider(api_provider));
    span.set_attribute("gen_ai.request.model", model.to_string());
    span.set_attribute("foldgate.api", api);
    if let Some((tenant, id)) = conversation {
        span.set_attribute("foldgate.conversation", conversation_hash(tenant, id));
    }
}

/// What the request forwarded, as its `x-foldgate-*` headers say it.
pub struct View {
    /// `none`, `reused`, `new`, ...: `x-foldgate-fold`.
    pub fold: &'static str,
    /// Estimated prompt tokens of the client's messages.
    pub tokens_in: u32,
    /// Estimated prompt tokens forwarded.
    pub tokens_out: u32,
    /// Messages the view shows as stubs.
    pub stubs: usize,
    /// Recalled excerpts injected.
    pub injected: usize,
}

/// Sets what the request forwarded on the current (the request's) span.
pub fn record_view(view: &View) {
    if !enabled() {
        return;
    }
    let span = Span::current();
    if !is_traced(&span) {
        return;
    }
    span.set_attribute("foldgate.fold", view.fold);
    span.set_attribute("foldgate.tokens.in", i64::from(view.tokens_in));
    span.set_attribute("foldgate.tokens.out", i64::from(view.tokens_out));
    span.set_attribute("foldgate.stubs", view.stubs as i64);
    span.set_attribute("foldgate.recall.injected", view.injected as i64);
}

/// Records the prompt tokens the upstream reported on `span` (the
/// request's), once the answer's usage went by.
pub fn record_input_tokens(span: &Span, tokens: u32) {
    if enabled() && is_traced(span) {
        span.set_attribute("gen_ai.usage.input_tokens", i64::from(tokens));
    }
}

/// The request span to keep for a later [`record_input_tokens`]: the
/// current one when its request is traced.
pub fn current_if_traced() -> Option<Span> {
    if !enabled() {
        return None;
    }
    Some(Span::current()).filter(is_traced)
}

/// `gen_ai.operation.name` of an API's requests.
fn operation(api: &str) -> &'static str {
    match api {
        "gemini" => "generate_content",
        _ => "chat",
    }
}

/// `gen_ai.provider.name` of an API's provider, as the conventions spell it.
fn provider(name: &'static str) -> &'static str {
    match name {
        "gemini" => "gcp.gemini",
        other => other,
    }
}

/// A conversation's key (tenant, id) as traces show it: 16 hex digits of
/// its SHA-256, so neither the client's id nor its tenant's credential
/// hash leaves.
pub fn conversation_hash(tenant: &str, conversation: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(tenant.as_bytes())
        .chain_update(b"/")
        .chain_update(conversation.as_bytes())
        .finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        let name = http::HeaderName::from_bytes(key.as_bytes());
        if let (Ok(name), Ok(value)) = (name, http::HeaderValue::from_str(&value)) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conversation_hash_hides_the_key_and_tells_keys_apart() {
        let hash = conversation_hash("t1", "secret-conversation");
        assert_eq!(hash.len(), 16);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(hash, conversation_hash("t1", "secret-conversation"));
        assert_ne!(hash, conversation_hash("t2", "secret-conversation"));
        assert_ne!(hash, conversation_hash("t1", "secret-conversation2"));
    }

    #[test]
    fn the_sampled_flag_is_read_from_a_valid_traceparent_only() {
        let tp = |s: &str| sampled_flag(s.as_bytes());
        assert_eq!(
            tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some(true)
        );
        assert_eq!(
            tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            Some(false)
        );
        assert_eq!(
            tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03"),
            Some(true)
        );
        assert_eq!(
            tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"),
            None
        );
        assert_eq!(tp("00-4bf92f35-00f067aa0ba902b7-01"), None);
        assert_eq!(
            tp("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(tp("garbage"), None);
    }

    #[test]
    fn draws_are_spread_over_the_unit_interval() {
        let draws: Vec<f64> = (0..10_000).map(|_| crate::random::unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let below = draws.iter().filter(|d| **d < 0.25).count();
        assert!(
            (2_000..3_000).contains(&below),
            "{below} of 10000 below 0.25"
        );
    }

    #[test]
    fn off_nothing_is_injected() {
        let mut headers = HeaderMap::new();
        inject(&Span::none(), &mut headers);
        assert!(headers.is_empty());
    }
}
