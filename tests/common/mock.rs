//! A mock upstream: a real hyper server on 127.0.0.1:0 that records every
//! request and answers through a programmable handler.

use bytes::Bytes;
use foldgate::body::{self, Body};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    /// Path and query.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub version: http::Version,
}

impl Recorded {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

type Handler =
    Arc<dyn Fn(Recorded) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync>;

/// The running mock.
pub struct Mock {
    pub addr: SocketAddr,
    pub url: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Mock {
    /// Starts a mock whose answers come from `handler`.
    pub async fn start<F, Fut>(handler: F) -> Self
    where
        F: Fn(Recorded) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        Self::start_with_tls(None, handler).await
    }

    /// Like [`Mock::start`], terminating TLS with `tls` when given.
    pub async fn start_with_tls<F, Fut>(tls: Option<tokio_rustls::TlsAcceptor>, handler: F) -> Self
    where
        F: Fn(Recorded) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |r| Box::pin(handler(r)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let handler = handler.clone();
                let recorded = recorded.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let handler = handler.clone();
                        let recorded = recorded.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|c| c.to_bytes())
                                .unwrap_or_default();
                            let rec = Recorded {
                                method: parts.method,
                                uri: parts
                                    .uri
                                    .path_and_query()
                                    .map(|p| p.to_string())
                                    .unwrap_or_default(),
                                headers: parts.headers,
                                body,
                                version: parts.version,
                            };
                            recorded.lock().unwrap().push(rec.clone());
                            Ok::<_, Infallible>(handler(rec).await)
                        }
                    });
                    let builder = auto::Builder::new(TokioExecutor::new());
                    match tls {
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                        Some(acceptor) => {
                            if let Ok(s) = acceptor.accept(stream).await {
                                let _ = builder.serve_connection(TokioIo::new(s), service).await;
                            }
                        }
                    }
                });
            }
        });
        Self {
            addr,
            url: format!("{scheme}://{addr}"),
            requests,
            task,
        }
    }

    /// A mock that answers every request with 200 and echoes it as JSON.
    pub async fn echo() -> Self {
        Self::start(|r: Recorded| async move { json(StatusCode::OK, &echo_of(&r)) }).await
    }

    /// Requests received so far.
    pub fn received(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// A JSON description of a request.
pub fn echo_of(r: &Recorded) -> serde_json::Value {
    serde_json::json!({
        "method": r.method.as_str(),
        "uri": r.uri,
        "len": r.body.len(),
    })
}

/// A JSON response.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body::full(value.to_string()))
        .unwrap()
}

/// A streamed response whose chunks the test sends through the returned
/// sender; the body ends when the sender is dropped.
pub fn stream(content_type: &str) -> (mpsc::Sender<Bytes>, Response<Body>) {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let resp = Response::builder()
        .status(200)
        .header("content-type", content_type)
        .body(body::boxed(ChannelBody(rx)))
        .unwrap();
    (tx, resp)
}

/// Sleeps, then returns `resp` (for timeout tests).
pub async fn delayed(after: Duration, resp: Response<Body>) -> Response<Body> {
    tokio::time::sleep(after).await;
    resp
}

/// A body whose frames come from a channel.
pub struct ChannelBody(pub mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

/// A mock whose answers read and write one shared state `S` (a wire's
/// mock: what it saw, its rule violations, its turn count).
pub struct Stateful<S> {
    pub mock: Mock,
    pub state: Arc<S>,
}

impl<S: Default + Send + Sync + 'static> Stateful<S> {
    /// Starts a mock answering each request with `answer` over a fresh `S`.
    pub async fn with(answer: fn(&S, Recorded) -> Response<Body>) -> Self {
        let state = Arc::new(S::default());
        let s = state.clone();
        let mock = Mock::start(move |r| {
            let s = s.clone();
            async move { answer(&s, r) }
        })
        .await;
        Self { mock, state }
    }

    pub fn url(&self) -> &str {
        &self.mock.url
    }
}
