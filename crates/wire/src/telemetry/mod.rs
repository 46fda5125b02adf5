//! OpenTelemetry traces over OTLP (`[telemetry]`, docs/telemetry.md):
//! the spans of a traced request (request, fold, summarizer call, recall
//! round, upstream call), made with the OpenTelemetry SDK itself, and W3C
//! `traceparent` in and out.
//!
//! The log's `tracing` subscriber knows nothing of traces: a traced
//! request carries its OpenTelemetry [`Context`] beside its future
//! ([`within`], attached on every poll), its spans find their parent as the
//! context in force, and an untraced request carries none. Off (no
//! endpoint), every function here returns at its first branch: [`enabled`]
//! is one relaxed atomic load. On, an untraced request pays the sampling
//! draw and a look at the (empty) context in force where a span could
//! start.

mod export;
mod layer;

pub use layer::RequestSpans;

use crate::api::Api;
use crate::config::TelemetryConfig;
use http::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use pin_project_lite::pin_project;
use prometheus_client::metrics::counter::Counter;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::task::Poll;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// `telemetry.sampling_ratio`, as `f64` bits.
static RATIO: AtomicU64 = AtomicU64::new(0);

/// The tracer every span starts from, once traces are on.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// `telemetry.trace_probes`: whether health and metrics requests are traced.
static TRACE_PROBES: AtomicBool = AtomicBool::new(false);

/// Paths probes and scrapers call: untraced unless `telemetry.trace_probes`.
const PROBES: [&str; 2] = ["/foldgate/health", "/foldgate/metrics"];

/// Whether traces are being recorded.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether a request with these headers is traced, decided once, as it
/// arrives (parent-based): a client's `traceparent` by its sampled flag,
/// else `telemetry.sampling_ratio`.
fn traced(headers: &HeaderMap) -> bool {
    if !enabled() {
        return false;
    }
    match headers
        .get("traceparent")
        .and_then(|v| sampled_flag(v.as_bytes()))
    {
        Some(sampled) => sampled,
        None => fastrand::f64() < f64::from_bits(RATIO.load(Ordering::Relaxed)),
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

/// Starts exporting traces per `config` (the export thread, the tracer)
/// and marks telemetry [`enabled`]; `None` when `config` sets no endpoint.
/// Once a process: a second start keeps the first tracer.
pub fn start(config: &TelemetryConfig) -> Result<Option<Telemetry>, TelemetryError> {
    let Some(endpoint) = config.endpoint.as_deref() else {
        return Ok(None);
    };
    let processor = export::HandOff::start(config, endpoint).map_err(TelemetryError)?;
    // Which requests are traced is decided as they arrive ([`traced`]):
    // every span started is recorded.
    let resource = Resource::builder()
        .with_service_name(config.service_name.clone())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource)
        .with_span_processor(processor)
        .build();
    let _first = TRACER.set(provider.tracer("foldgate"));
    RATIO.store(config.sampling_ratio.to_bits(), Ordering::Relaxed);
    TRACE_PROBES.store(config.trace_probes, Ordering::Relaxed);
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some(Telemetry { provider }))
}

/// The context of a traced request's span (or of one under it) in force
/// on this thread, `None` in an untraced request or with telemetry off.
pub fn current() -> Option<Context> {
    if !enabled() {
        return None;
    }
    Context::map_current(|cx| cx.has_active_span().then(|| cx.clone()))
}

/// A span `name` of `kind` with `attributes`, under `parent`: the context
/// to run its work [`within`]. The span ends when the last clone of the
/// context is dropped.
fn start_span(
    parent: &Context,
    name: &'static str,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
) -> Option<Context> {
    let tracer = TRACER.get()?;
    let span = tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(tracer, parent);
    Some(parent.with_span(span))
}

/// The span of a request that arrives with these headers, `None` when it
/// is not traced: the server span, the child of the client's
/// `traceparent` when it sent one (without one the request starts a
/// trace).
fn request(headers: &HeaderMap, method: &http::Method, path: &str) -> Option<Context> {
    if !TRACE_PROBES.load(Ordering::Relaxed) && PROBES.contains(&path) {
        return None;
    }
    if !traced(headers) {
        return None;
    }
    let parent = if headers.contains_key("traceparent") {
        TraceContextPropagator::new().extract(&Headers(headers))
    } else {
        Context::new()
    };
    let id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let cx = start_span(
        &parent,
        "request",
        SpanKind::Server,
        vec![
            KeyValue::new("request_id", id.to_string()),
            KeyValue::new("http.request.method", method.to_string()),
            KeyValue::new("url.path", path.to_string()),
        ],
    )?;
    let usage = RequestUsage::default();
    let cx = cx.with_value(usage.clone());
    usage.with(|u| u.request = Some(cx.clone()));
    Some(cx)
}

/// A traced request's usage: what the upstream reported, summed over the
/// request's upstream calls (the first and each recall round's), set on
/// the request's span as it grows; and the upstream call whose answer is
/// being read, kept until its usage goes on its own span. A value of the
/// request's context (so every child context carries it); it holds the
/// request's context in turn, a cycle the request's end breaks
/// ([`RequestUsage::clear`]).
#[derive(Clone, Default)]
struct RequestUsage(Arc<Mutex<Usage>>);

#[derive(Default)]
struct Usage {
    input: Option<u64>,
    output: Option<u64>,
    request: Option<Context>,
    upstream: Option<Context>,
}

impl RequestUsage {
    fn with<T>(&self, f: impl FnOnce(&mut Usage) -> T) -> Option<T> {
        self.0.lock().ok().map(|mut u| f(&mut u))
    }

    /// At the request's end: lets go of the contexts it holds.
    fn clear(&self) {
        let held = self.with(|u| (u.request.take(), u.upstream.take()));
        drop(held);
    }
}

/// Ends the usage bookkeeping of the request `cx` is the context of.
fn request_ended(cx: &Context) {
    if let Some(usage) = cx.get::<RequestUsage>() {
        usage.clear();
    }
}

/// Sets `reported` as the usage attributes of `span`.
fn set_usage(span: &opentelemetry::trace::SpanRef<'_>, input: Option<u64>, output: Option<u64>) {
    if let Some(input) = input {
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.input_tokens",
            i64::try_from(input).unwrap_or(i64::MAX),
        ));
    }
    if let Some(output) = output {
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.output_tokens",
            i64::try_from(output).unwrap_or(i64::MAX),
        ));
    }
}

pin_project! {
    /// A future run with a traced context attached on every poll (or as
    /// it is, without one).
    pub struct Within<F> {
        #[pin]
        inner: F,
        cx: Option<Context>,
    }
}

impl<F: Future> Future for Within<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, task: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _attached = this.cx.as_ref().map(|cx| cx.clone().attach());
        this.inner.poll(task)
    }
}

/// Runs `work` with `cx` (a span's context from this module) in force, so
/// the spans it starts are that span's children; with `None`, as it is.
pub fn within<F: Future>(cx: Option<Context>, work: F) -> Within<F> {
    Within { inner: work, cx }
}

/// A span under the context in force, when it is a traced request's.
fn child(
    name: &'static str,
    kind: SpanKind,
    attributes: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Context> {
    let parent = current()?;
    start_span(&parent, name, kind, attributes())
}

/// The span of a fold under `parent` (the request's, from [`current`]);
/// `started` is `inline` (the request waits) or `background`.
pub fn fold(parent: Option<&Context>, started: &'static str) -> Option<Context> {
    start_span(
        parent?,
        "fold",
        SpanKind::Internal,
        vec![KeyValue::new("foldgate.fold.started", started)],
    )
}

/// The span of one summarizer call to `model` over an API's wire format
/// (its names in the conventions are its spec's,
/// [`crate::api::spec::Telemetry`]).
pub fn summarizer_call(api: Api, model: &str) -> Option<Context> {
    let names = &api.spec().telemetry;
    child("summarizer call", SpanKind::Client, || {
        vec![
            KeyValue::new("gen_ai.operation.name", names.operation),
            KeyValue::new("gen_ai.provider.name", names.provider),
            KeyValue::new("gen_ai.request.model", model.to_string()),
        ]
    })
}

/// The span of recall round `round` (from 1), answering `calls` calls;
/// also sets the rounds so far on the request's span (the one in force).
pub fn recall_round(round: u32, calls: usize) -> Option<Context> {
    let parent = current()?;
    parent
        .span()
        .set_attribute(KeyValue::new("foldgate.recall.rounds", i64::from(round)));
    start_span(
        &parent,
        "recall round",
        SpanKind::Internal,
        vec![
            KeyValue::new("foldgate.recall.round", i64::from(round)),
            KeyValue::new("foldgate.recall.calls", calls as i64),
        ],
    )
}

/// The span of one call upstream to `provider` (its configured name). It
/// stays open until the usage of its answer is recorded
/// ([`record_usage`]), or the next upstream call of the request starts, or
/// the request ends.
pub fn upstream(provider: &str) -> Option<Context> {
    let cx = child("upstream call", SpanKind::Client, || {
        vec![KeyValue::new("foldgate.provider", provider.to_string())]
    })?;
    if let Some(usage) = cx.get::<RequestUsage>() {
        let previous = usage.with(|u| u.upstream.replace(cx.clone()));
        drop(previous);
    }
    Some(cx)
}

/// Sets `traceparent` (and `tracestate`) on an outgoing request to name
/// `cx`'s span as its parent, replacing the client's; an untraced
/// request's call keeps the client's as it came.
pub fn inject(cx: Option<&Context>, headers: &mut HeaderMap) {
    if let Some(cx) = cx {
        TraceContextPropagator::new().inject_context(cx, &mut HeadersMut(headers));
    }
}

/// Records the HTTP status a call got on `cx`'s span.
pub fn record_status(cx: Option<&Context>, status: http::StatusCode) {
    if let Some(cx) = cx {
        cx.span().set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
    }
}

/// Sets the GenAI semantic conventions' attributes and foldgate's
/// conversation on the request's span (the one in force): the request's
/// API's names in the conventions (its spec's,
/// [`crate::api::spec::Telemetry`]), the model asked for, and the
/// conversation's key (tenant, id), exported only hashed.
pub fn record_request(api: Api, model: &str, conversation: Option<(&str, &str)>) {
    let Some(cx) = current() else {
        return;
    };
    let span = cx.span();
    let spec = api.spec();
    let names = &spec.telemetry;
    span.set_attribute(KeyValue::new("gen_ai.operation.name", names.operation));
    span.set_attribute(KeyValue::new("gen_ai.provider.name", names.provider));
    span.set_attribute(KeyValue::new("gen_ai.request.model", model.to_string()));
    span.set_attribute(KeyValue::new("foldgate.api", spec.name));
    if let Some((tenant, id)) = conversation {
        span.set_attribute(KeyValue::new(
            "foldgate.conversation",
            conversation_hash(tenant, id),
        ));
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

/// Sets what the request forwarded on the request's span (the one in
/// force).
pub fn record_view(view: &View) {
    let Some(cx) = current() else {
        return;
    };
    cx.span().set_attributes([
        KeyValue::new("foldgate.fold", view.fold),
        KeyValue::new("foldgate.tokens.in", i64::from(view.tokens_in)),
        KeyValue::new("foldgate.tokens.out", i64::from(view.tokens_out)),
        KeyValue::new("foldgate.stubs", view.stubs as i64),
        KeyValue::new("foldgate.recall.injected", view.injected as i64),
    ]);
}

/// Records the tokens the upstream reported for one answer, once its
/// usage went by, under `cx` (the request's context, or any of its
/// children's): on the span of the upstream call that answered, and added
/// to the request's span, which says the sum over the request's upstream
/// calls (recall rounds included). Under a context without a request
/// (none in foldgate), on `cx`'s span.
pub fn record_usage(cx: &Context, reported: crate::usage::Reported) {
    let (input, output) = (
        reported.prompt.map(u64::from),
        reported.output.map(u64::from),
    );
    let Some(usage) = cx.get::<RequestUsage>() else {
        set_usage(&cx.span(), input, output);
        return;
    };
    let held = usage.with(|u| {
        let add = |sum: Option<u64>, more: Option<u64>| match (sum, more) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        u.input = add(u.input, input);
        u.output = add(u.output, output);
        if let Some(request) = &u.request {
            set_usage(&request.span(), u.input, u.output);
        }
        u.upstream.take()
    });
    // The upstream call's span ends here (its answer was read).
    if let Some(upstream) = held.flatten() {
        set_usage(&upstream.span(), input, output);
    }
}

/// [`record_usage`] under the context in force: a recall round's answer.
pub fn record_round_usage(reported: crate::usage::Reported) {
    if let Some(cx) = current() {
        record_usage(&cx, reported);
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
        let draws: Vec<f64> = (0..10_000).map(|_| fastrand::f64()).collect();
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
        inject(current().as_ref(), &mut headers);
        assert!(headers.is_empty());
    }
}
