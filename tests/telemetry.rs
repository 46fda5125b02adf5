//! OpenTelemetry traces over OTLP, read by real receivers this test starts
//! on 127.0.0.1:0, built on the official protobuf definitions
//! (`opentelemetry-proto`): an HTTP/protobuf `POST /v1/traces` receiver
//! and the gRPC `TraceService`. foldgate runs as users run it (the real
//! binary on a config file) in front of a scripted model that folds,
//! calls the recall tool once and answers; the spans must arrive with
//! their parents and attributes, the client's `traceparent` must be kept,
//! and the upstream must get foldgate's. A collector that hangs or is
//! down must cost no request (the dropped-span counter says what was lost).

use crate::common;

use bytes::Bytes;
use common::convo::Convo;
use common::llm::LOSSY_SUMMARY;
use common::mock::{self, Mock, Recorded};
use common::{Reply, metric, post_json};
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const CONVERSATION: &str = "traced-conversation-id";
const KEY: &str = "sk-tenant-traced";

/// One span as a receiver got it: ids in hex, attributes as text.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    trace: String,
    id: String,
    parent: String,
    service: String,
    attributes: BTreeMap<String, String>,
}

impl Got {
    fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

type Spans = Arc<Mutex<Vec<Got>>>;

/// Flattens an export request into its spans.
fn record(spans: &Spans, request: ExportTraceServiceRequest) {
    let mut got = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(text)
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                got.push(Got {
                    name: span.name,
                    trace: hex(&span.trace_id),
                    id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    service: service.clone(),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv)))
                        .collect(),
                });
            }
        }
    }
}

/// How a receiver answers.
#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    Answers,
    /// Reads the export and never answers.
    Hangs,
}

/// A receiver on 127.0.0.1:0 and the spans it got.
struct Receiver {
    endpoint: String,
    spans: Spans,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// OTLP/HTTP: `POST /v1/traces` with an `ExportTraceServiceRequest`.
    async fn http(behaviour: Behaviour) -> Self {
        let spans = Spans::default();
        let kept = spans.clone();
        let serve = move |req: Request<Incoming>| {
            let spans = kept.clone();
            async move {
                assert_eq!(req.uri().path(), "/v1/traces");
                assert_eq!(req.headers()["content-type"], "application/x-protobuf");
                let auth = req.headers().get("x-collector-key").cloned();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                if behaviour == Behaviour::Hangs {
                    std::future::pending::<()>().await;
                }
                if auth.as_ref().is_some_and(|v| v == "collector-secret") {
                    record(&spans, ExportTraceServiceRequest::decode(body).unwrap());
                }
                let answer = ExportTraceServiceResponse::default().encode_to_vec();
                Ok::<_, Infallible>(
                    Response::builder()
                        .header("content-type", "application/x-protobuf")
                        .body(http_body_util::Full::new(Bytes::from(answer)))
                        .unwrap(),
                )
            }
        };
        let (endpoint, task) = listen(hyper::service::service_fn(serve)).await;
        Self {
            endpoint,
            spans,
            task,
        }
    }

    /// OTLP/gRPC: the `TraceService` server of the official definitions.
    async fn grpc() -> Self {
        let spans = Spans::default();
        let service = TraceServiceServer::new(Collector(spans.clone()));
        let (endpoint, task) = listen(hyper_util::service::TowerToHyperService::new(service)).await;
        Self {
            endpoint,
            spans,
            task,
        }
    }

    /// The `[telemetry]` keys exporting to this receiver with its
    /// credential.
    fn keys(&self) -> String {
        format!(
            "endpoint = \"{}\"\nheaders = {{ \"x-collector-key\" = \"collector-secret\" }}\n",
            self.endpoint
        )
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (up to 20 s) until the spans got satisfy `done`.
    async fn wait_for(&self, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        for _ in 0..200 {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{what}: never arrived; got {:#?}", self.spans());
    }
}

/// Serves `service` (HTTP/1.1 and HTTP/2) on 127.0.0.1:0.
async fn listen<S, B>(service: S) -> (String, tokio::task::JoinHandle<()>)
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service.clone();
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (format!("http://{addr}"), task)
}

struct Collector(Spans);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if request
            .metadata()
            .get("x-collector-key")
            .is_some_and(|v| v == "collector-secret")
        {
            record(&self.0, request.into_inner());
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The scripted model: summaries for the summarizer; for the chat, a call
/// of the recall tool while it is offered and no round answered yet, else
/// an answer with usage.
async fn model(r: Recorded) -> Response<foldgate::body::Body> {
    let body = r.json();
    if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT) {
        return mock::json(
            StatusCode::OK,
            &json!({"choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": LOSSY_SUMMARY}}]}),
        );
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let offered = body["tools"].to_string().contains("foldgate_recall");
    let answered = messages.iter().any(|m| m["role"] == "tool");
    // Each round its own usage, so the request's sum tells them apart.
    let usage = if answered {
        json!({"prompt_tokens": 400, "completion_tokens": 11, "total_tokens": 411})
    } else {
        json!({"prompt_tokens": 321, "completion_tokens": 7, "total_tokens": 328})
    };
    let message = if offered && !answered {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_r", "type": "function",
            "function": {"name": "foldgate_recall", "arguments": "{\"query\": \"favourite colour\"}"}}]})
    } else {
        json!({"role": "assistant", "content": "The favourite colour is teal."})
    };
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    if body["stream"] == true {
        // The same answer as OpenAI streams it: the message as one delta,
        // the finish, the usage chunk, `[DONE]`.
        let chunk = |choices: Value, usage: Value| {
            let c = json!({"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": body["model"],
                "choices": choices, "usage": usage});
            format!("data: {c}\n\n")
        };
        let events = [
            chunk(
                json!([{"index": 0, "delta": message, "finish_reason": null}]),
                Value::Null,
            ),
            chunk(
                json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
                Value::Null,
            ),
            chunk(json!([]), usage),
            "data: [DONE]\n\n".to_string(),
        ];
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(foldgate::body::full(events.concat()))
            .unwrap();
    }
    mock::json(
        StatusCode::OK,
        &json!({"id": "chatcmpl-t", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
    )
}

/// foldgate's configuration in front of `upstream`, folding on the first
/// request (inline) and offering the recall tool, with `telemetry`.
fn config(upstream: &str, port: u16, telemetry: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n{}\
         [models.\"tiny-*\"]\ncontext_window = 4000\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
         [summarizer]\nprovider = \"mock\"\nmax_summary_tokens = 400\nretries = 0\ntimeout = \"5s\"\n\
         [state]\nbackend = \"memory\"\n\
         [archive]\nrecall = \"tool\"\n\
         [telemetry]\n{telemetry}",
        common::providers(upstream)
    )
}

/// The real binary serving `toml` (written to `path`), stopped on drop.
struct Served {
    child: tokio::process::Child,
    url: String,
}

impl Served {
    async fn start(path: &Path, toml: &str, port: u16) -> Self {
        Self::start_logging(path, toml, port, Stdio::inherit()).await
    }

    /// [`Served::start`], its log going to `stderr`.
    async fn start_logging(path: &Path, toml: &str, port: u16, stderr: Stdio) -> Self {
        std::fs::write(path, toml).unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
            .args(["serve", "--config"])
            .arg(path)
            .env("FOLDGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        common::wait_listening(port).await;
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn ask(&self, body: &Value, traceparent: Option<&str>) -> Reply {
        let mut headers = vec![
            ("x-conversation-id", CONVERSATION),
            ("authorization", "Bearer sk-tenant-traced"),
        ];
        if let Some(tp) = traceparent {
            headers.push(("traceparent", tp));
        }
        post_json(&format!("{}/v1/chat/completions", self.url), &headers, body).await
    }

    async fn dropped(&self) -> f64 {
        let reply = common::send(
            http::Method::GET,
            &format!("{}/foldgate/metrics", self.url),
            &[],
            "",
        )
        .await;
        metric(
            &String::from_utf8_lossy(&reply.body),
            "foldgate_telemetry_spans_dropped_total",
        )
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A conversation that folds on its first request, its fact folded and
/// the question last (the model calls the recall tool for it), asked
/// streamed or not.
fn conversation(stream: bool) -> Value {
    Convo::fact_then_question(
        "the favourite colour of the customer is teal",
        "what is the favourite colour of the customer?",
    )
    .body_for("tiny-model", stream)
}

/// The one span named `name`.
fn one<'a>(spans: &'a [Got], name: &str) -> &'a Got {
    let named: Vec<&Got> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(named.len(), 1, "{name}: {spans:#?}");
    named[0]
}

/// The traceparent `r` carried, split: (trace id, parent span id, flags).
fn traceparent(r: &Recorded) -> (String, String, String) {
    let tp = r
        .header("traceparent")
        .unwrap_or_else(|| panic!("no traceparent: {r:?}"));
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{tp}");
    assert_eq!(parts[0], "00");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

fn is_summarizer(r: &Recorded) -> bool {
    r.json()
        .pointer("/messages/0/content")
        .and_then(Value::as_str)
        == Some(SYSTEM_PROMPT)
}

/// One folding, recalling request traced (its answer streamed or not):
/// every span, its parent and attributes, as `receiver` got them, and
/// what the upstream got.
async fn traced_request(receiver: &Receiver, protocol: &str, stream: bool) {
    let upstream = Mock::start(model).await;
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let telemetry = format!(
        "endpoint = \"{}\"\nprotocol = \"{protocol}\"\nservice_name = \"foldgate-under-test\"\n\
         headers = {{ \"x-collector-key\" = \"collector-secret\" }}\n",
        receiver.endpoint
    );
    let toml = config(&upstream.url, port, &telemetry);
    let fg = Served::start(&dir.path().join("foldgate.toml"), &toml, port).await;
    let client = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let reply = fg.ask(&conversation(stream), Some(&client)).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    if stream {
        let text = String::from_utf8_lossy(&reply.body);
        assert!(text.contains("The favourite colour is teal."), "{text}");
        assert!(!text.contains("foldgate_recall"), "{text}");
    } else {
        assert_eq!(
            reply.json()["choices"][0]["message"]["content"],
            "The favourite colour is teal."
        );
    }

    let names = [
        "request",
        "fold",
        "summarizer call",
        "recall round",
        "upstream call",
    ];
    let spans = receiver
        .wait_for("the request's spans", |s| {
            names.iter().all(|n| s.iter().any(|g| g.name == *n))
                && s.iter().filter(|g| g.name == "upstream call").count() == 2
        })
        .await;
    assert!(spans.iter().all(|s| s.trace == CLIENT_TRACE), "{spans:#?}");
    assert!(spans.iter().all(|s| s.service == "foldgate-under-test"));

    let request = one(&spans, "request");
    assert_eq!(
        request.parent, CLIENT_SPAN,
        "the client's span is the parent"
    );
    let attr = |k: &str| request.attr(k).to_string();
    assert_eq!(attr("gen_ai.operation.name"), "chat");
    assert_eq!(attr("gen_ai.provider.name"), "openai");
    assert_eq!(attr("gen_ai.request.model"), "tiny-model");
    // The sum over the request's two upstream calls (the recall round's
    // included), as the client's usage says.
    assert_eq!(attr("gen_ai.usage.input_tokens"), "721");
    assert_eq!(attr("gen_ai.usage.output_tokens"), "18");
    assert_eq!(attr("foldgate.fold"), "new");
    assert_eq!(attr("foldgate.recall.rounds"), "1");
    let tokens_in: u64 = attr("foldgate.tokens.in").parse().unwrap();
    let tokens_out: u64 = attr("foldgate.tokens.out").parse().unwrap();
    assert!(tokens_out < tokens_in, "{tokens_out} < {tokens_in}");
    assert_eq!(attr("foldgate.stubs"), "0");
    let hash = attr("foldgate.conversation");
    assert_eq!(hash.len(), 16, "{hash}");
    for span in &spans {
        for value in span.attributes.values() {
            assert!(
                !value.contains(CONVERSATION) && !value.contains(KEY),
                "the raw key leaves in {span:#?}"
            );
        }
    }

    let fold = one(&spans, "fold");
    assert_eq!(fold.parent, request.id, "request -> fold");
    assert_eq!(fold.attr("foldgate.fold.started"), "inline");
    let summarizer = one(&spans, "summarizer call");
    assert_eq!(summarizer.parent, fold.id, "fold -> summarizer call");
    assert_eq!(summarizer.attr("gen_ai.request.model"), "tiny-model");
    assert_eq!(summarizer.attr("http.response.status_code"), "200");
    let round = one(&spans, "recall round");
    assert_eq!(round.parent, request.id, "request -> recall round");
    assert_eq!(round.attr("foldgate.recall.round"), "1");
    let upstream_calls: Vec<&Got> = spans.iter().filter(|s| s.name == "upstream call").collect();
    let first = upstream_calls.iter().find(|s| s.parent == request.id);
    let again = upstream_calls.iter().find(|s| s.parent == round.id);
    let (first, again) = (
        first.expect("request -> upstream call"),
        again.expect("recall round -> upstream call"),
    );
    assert_eq!(first.attr("foldgate.provider"), "mock");
    // Each upstream call carries its own answer's usage.
    assert_eq!(first.attr("gen_ai.usage.input_tokens"), "321");
    assert_eq!(first.attr("gen_ai.usage.output_tokens"), "7");
    assert_eq!(again.attr("gen_ai.usage.input_tokens"), "400");
    assert_eq!(again.attr("gen_ai.usage.output_tokens"), "11");
    if stream {
        let text = String::from_utf8_lossy(&reply.body);
        assert!(text.contains("\"prompt_tokens\":721"), "{text}");
    } else {
        assert_eq!(reply.json()["usage"]["prompt_tokens"], 721);
    }

    // The upstream got foldgate's span as the parent, in the client's trace.
    let received = upstream.received();
    let chats: Vec<&Recorded> = received.iter().filter(|r| !is_summarizer(r)).collect();
    assert_eq!(chats.len(), 2, "the first round and the recall round");
    let parents: Vec<(String, String, String)> = chats.iter().map(|r| traceparent(r)).collect();
    assert_eq!(
        parents,
        [
            (CLIENT_TRACE.into(), first.id.clone(), "01".into()),
            (CLIENT_TRACE.into(), again.id.clone(), "01".into())
        ]
    );
    let summarizer_call = received.iter().find(|r| is_summarizer(r)).unwrap();
    assert_eq!(
        traceparent(summarizer_call),
        (CLIENT_TRACE.into(), summarizer.id.clone(), "01".into())
    );
}

#[tokio::test]
async fn http_protobuf_spans_arrive_with_their_parents_and_attributes() {
    let receiver = Receiver::http(Behaviour::Answers).await;
    traced_request(&receiver, "http/protobuf", false).await;
}

/// A streamed answer's recall round runs on a task of its own: its span
/// and its upstream call's are still the request's.
#[tokio::test]
async fn a_streamed_recall_round_is_traced_under_its_request() {
    let receiver = Receiver::http(Behaviour::Answers).await;
    traced_request(&receiver, "http/protobuf", true).await;
}

#[tokio::test]
async fn grpc_spans_arrive_with_their_parents_and_attributes() {
    let receiver = Receiver::grpc().await;
    traced_request(&receiver, "grpc", false).await;
}

/// A client without a traceparent starts a trace; the upstream gets it.
#[tokio::test]
async fn a_request_without_traceparent_starts_a_trace() {
    let receiver = Receiver::http(Behaviour::Answers).await;
    let upstream = Mock::start(model).await;
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let telemetry = receiver.keys();
    let toml = config(&upstream.url, port, &telemetry);
    let fg = Served::start(&dir.path().join("foldgate.toml"), &toml, port).await;
    let body = Convo::with_turns(2).body_for("tiny-model", false);
    fg.ask(&body, None).await.assert_ok();
    let spans = receiver
        .wait_for("request and upstream call", |s| {
            s.iter().any(|g| g.name == "request") && s.iter().any(|g| g.name == "upstream call")
        })
        .await;
    let request = one(&spans, "request");
    assert_eq!(request.parent, "", "a root span");
    assert_eq!(request.service, "foldgate");
    assert_eq!(request.attr("foldgate.fold"), "none");
    let call = one(&spans, "upstream call");
    assert_eq!(call.parent, request.id);
    assert_eq!(call.trace, request.trace);
    let received = upstream.received();
    assert_eq!(
        traceparent(&received[0]),
        (request.trace.clone(), call.id.clone(), "01".into())
    );
}

/// Health checks and metric scrapes make no trace unless
/// `telemetry.trace_probes` asks for them; other requests still do.
#[tokio::test]
async fn probes_are_traced_only_when_asked() {
    for asked in [false, true] {
        let receiver = Receiver::http(Behaviour::Answers).await;
        let upstream = Mock::start(model).await;
        let dir = tempfile::tempdir().unwrap();
        let port = common::free_port();
        let telemetry = format!("{}trace_probes = {asked}\n", receiver.keys());
        let toml = config(&upstream.url, port, &telemetry);
        let fg = Served::start(&dir.path().join("foldgate.toml"), &toml, port).await;
        for _ in 0..3 {
            for path in ["/foldgate/health", "/foldgate/metrics"] {
                let reply =
                    common::send(http::Method::GET, &format!("{}{path}", fg.url), &[], "").await;
                assert_eq!(reply.status, 200);
            }
        }
        let body = Convo::with_turns(2).body_for("tiny-model", false);
        fg.ask(&body, None).await.assert_ok();
        let spans = receiver
            .wait_for("the chat request's span", |s| {
                s.iter()
                    .any(|g| g.name == "request" && g.attr("url.path") == "/v1/chat/completions")
                    && (!asked || s.iter().filter(|g| g.name == "request").count() == 7)
            })
            .await;
        let probes = spans
            .iter()
            .filter(|g| g.attr("url.path").starts_with("/foldgate/"))
            .count();
        assert_eq!(probes, if asked { 6 } else { 0 }, "{spans:#?}");
    }
}

/// A background fold is its request's child, and its summarizer call the
/// fold's, though the request has answered (and its span ended) before.
#[tokio::test]
async fn a_background_fold_is_traced_under_the_request_that_started_it() {
    let receiver = Receiver::http(Behaviour::Answers).await;
    let upstream = Mock::start(model).await;
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let telemetry = receiver.keys();
    let toml = config(&upstream.url, port, &telemetry)
        .replace("mode = \"inline\"", "mode = \"background\"");
    let fg = Served::start(&dir.path().join("foldgate.toml"), &toml, port).await;
    let client = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let reply = fg.ask(&conversation(false), Some(&client)).await;
    reply.assert_ok();
    assert_ne!(
        reply.header("x-foldgate-fold"),
        "new",
        "the request did not wait"
    );
    let spans = receiver
        .wait_for("request, fold and summarizer call", |s| {
            ["request", "fold", "summarizer call"]
                .iter()
                .all(|n| s.iter().any(|g| g.name == *n))
        })
        .await;
    let request = one(&spans, "request");
    let fold = one(&spans, "fold");
    assert_eq!(fold.attr("foldgate.fold.started"), "background");
    assert_eq!(fold.parent, request.id, "request -> fold");
    assert_eq!(
        one(&spans, "summarizer call").parent,
        fold.id,
        "fold -> summarizer call"
    );
    assert!(spans.iter().all(|s| s.trace == CLIENT_TRACE), "{spans:#?}");
}

/// Sampling 0 records no new trace (nor a client's unsampled one); a
/// client's sampled traceparent is still followed (parent-based), which
/// shows the exporter was working.
#[tokio::test]
async fn sampling_zero_sends_nothing_but_a_sampled_parent_is_followed() {
    let receiver = Receiver::http(Behaviour::Answers).await;
    let upstream = Mock::start(model).await;
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let telemetry = format!("{}sampling_ratio = 0.0\n", receiver.keys());
    let toml = config(&upstream.url, port, &telemetry);
    let fg = Served::start(&dir.path().join("foldgate.toml"), &toml, port).await;
    let body = Convo::with_turns(2).body_for("tiny-model", false);
    for _ in 0..5 {
        fg.ask(&body, None).await.assert_ok();
    }
    // Not traced: the upstream gets no traceparent of foldgate's, and a
    // client's unsampled one as it came.
    assert!(
        upstream
            .received()
            .iter()
            .all(|r| r.header("traceparent").is_none())
    );
    let unsampled = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-00");
    fg.ask(&body, Some(&unsampled)).await.assert_ok();
    let last = upstream.received().pop().unwrap();
    assert_eq!(last.header("traceparent"), Some(unsampled.as_str()));
    let client = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    fg.ask(&body, Some(&client)).await.assert_ok();
    let spans = receiver
        .wait_for("the sampled request", |s| {
            s.iter().any(|g| g.name == "request")
        })
        .await;
    // The exports are sent in order: the earlier requests' spans would be here.
    assert!(spans.iter().all(|s| s.trace == CLIENT_TRACE), "{spans:#?}");
    assert_eq!(spans.iter().filter(|s| s.name == "request").count(), 1);
}

/// A collector that hangs (or is down) costs no request: every request is
/// answered and what could not be sent is counted as dropped.
async fn requests_go_on(endpoint: &str) {
    let upstream = Mock::start(model).await;
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let telemetry = format!("endpoint = \"{endpoint}\"\nqueue = 4\nexport_timeout = \"1s\"\n");
    let toml = config(&upstream.url, port, &telemetry);
    let fg = Served::start(&dir.path().join("foldgate.toml"), &toml, port).await;
    assert_eq!(fg.dropped().await, 0.0);
    let body = Convo::with_turns(2).body_for("tiny-model", false);
    for _ in 0..20 {
        let reply = fg.ask(&body, None).await;
        reply.assert_ok();
        assert_eq!(
            reply.json()["choices"][0]["message"]["content"],
            "The favourite colour is teal."
        );
    }
    for _ in 0..100 {
        if fg.dropped().await > 0.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no span counted as dropped");
}

#[tokio::test]
async fn a_hanging_collector_costs_no_request_and_drops_are_counted() {
    let receiver = Receiver::http(Behaviour::Hangs).await;
    requests_go_on(&receiver.endpoint).await;
    assert!(receiver.spans().is_empty());
}

#[tokio::test]
async fn a_collector_that_is_down_costs_no_request_and_drops_are_counted() {
    let port = common::free_port();
    requests_go_on(&format!("http://127.0.0.1:{port}")).await;
}

/// With traces on, the log is as it was: a fold's event (logged inside
/// the fold and summarizer spans only traces have) still carries the
/// request's span, with its id, as its JSON `span`.
#[tokio::test]
async fn the_log_keeps_the_request_span_with_traces_on() {
    let receiver = Receiver::http(Behaviour::Answers).await;
    let upstream = Mock::start(model).await;
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let telemetry = format!("{}[log]\nformat = \"json\"\n", receiver.keys());
    let toml = config(&upstream.url, port, &telemetry);
    let mut fg = Served::start_logging(
        &dir.path().join("foldgate.toml"),
        &toml,
        port,
        Stdio::piped(),
    )
    .await;
    let headers = [
        ("x-conversation-id", CONVERSATION),
        ("x-request-id", "req-traced-42"),
    ];
    let url = format!("{}/v1/chat/completions", fg.url);
    let reply = post_json(&url, &headers, &conversation(false)).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    receiver
        .wait_for("the fold's span", |s| {
            s.iter().any(|g| g.name == "summarizer call")
        })
        .await;
    let log = common::terminate_and_read_log(&mut fg.child).await;
    let fold: Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["target"] == "foldgate::fold" && l["outcome"] == "ok")
        .unwrap_or_else(|| panic!("no fold event in:\n{log}"));
    assert_eq!(fold["span"]["name"], "request", "{fold}");
    assert_eq!(fold["span"]["request_id"], "req-traced-42", "{fold}");
}
