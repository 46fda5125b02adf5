//! The chat pipeline: intercepts `POST …/chat/completions`, applies or makes
//! a fold, forwards the view, and streams the answer back.
//!
//! `ChatRequest::read` (the raw JSON: model, provider, conversation key,
//! estimate, the fold chain, read once) → untouched, or upgraded once to
//! the parsed form and its `Turn` → [`crate::fold::plan`] → (fold
//! under the conversation's single-flight lock → summarizer → new state) →
//! forward (the client's bytes when the view is the messages unchanged) →
//! on a context-length 400, one emergency fold and retry → response with
//! `x-foldgate-*` headers, usage read on the way for calibration.

mod context_error;
mod fast;
mod fold_run;
#[doc(hidden)]
pub mod fuzzing;
pub mod key;
mod request;
mod tap;
mod turn;

pub use context_error::{ContextError, detect as detect_context_error};

use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::upstream::UpstreamLatency;
use crate::upstream::{Provider, headers};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use request::ChatRequest;
use std::sync::Arc;
use std::time::Instant;
use turn::Prepared;

/// Largest upstream 400 body read to look for a context-length error.
const MAX_ERROR_BODY: usize = 1 << 20;

/// Whether foldgate intercepts this request.
pub fn is_chat(method: &Method, path: &str) -> bool {
    method == Method::POST && matches!(path, "/v1/chat/completions" | "/chat/completions")
}

/// Handles one chat completion whose body has been read: prepare the view,
/// send it, and on a context-length error fold once more and retry once.
pub async fn handle(
    app: &Arc<App>,
    parts: Parts,
    bytes: Bytes,
) -> Result<Response<Body>, ApiError> {
    Metrics::inc(&app.metrics.chat_requests);
    let mut request = ChatRequest::read(app, &parts.headers, bytes).await?;
    let mut prepared = request.prepare(app, &parts.headers).await?;
    let mut retried = false;
    loop {
        let body = request.body(&mut prepared)?;
        let (head, incoming) = send(app, &request.provider, &parts, body).await?;
        if head.status != StatusCode::BAD_REQUEST {
            return Ok(respond(app, head, incoming, &prepared, request.model));
        }
        let error_body = read_bounded(incoming).await?;
        match context_error::detect(&error_body) {
            Some(err) if !retried => {
                retried = true;
                tracing::info!(
                    model = %request.model,
                    window = err.window,
                    "upstream rejected the prompt as too long; folding and retrying once"
                );
                Metrics::inc(&app.metrics.reactive_folds);
                if let Some(window) = err.window {
                    app.tokens.record_discovered(&request.model, window);
                }
                let window = err.window.unwrap_or(u32::MAX).min(prepared.tokens_out);
                prepared = request.prepare_smaller(app, &parts.headers, window).await?;
            }
            _ => {
                let mut response = Response::from_parts(head, body::full(error_body));
                prepared.annotate(response.headers_mut());
                return Ok(response);
            }
        }
    }
}

/// Sends one attempt upstream; the response head is cleaned for the client
/// and carries the upstream's latency.
async fn send(
    app: &App,
    provider: &Provider,
    parts: &Parts,
    body: Bytes,
) -> Result<(http::response::Parts, hyper::body::Incoming), ApiError> {
    let len = body.len();
    let mut req = Request::from_parts(parts.clone(), body::full(body));
    req.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    let started = Instant::now();
    let drop_auth = !app.config.server.api_keys.is_empty();
    let response = provider
        .send(req, app.config.server.upstream_timeout, drop_auth)
        .await?;
    let latency = started.elapsed();
    let (mut head, incoming) = response.into_parts();
    headers::to_client(&mut head.headers);
    head.extensions.insert(UpstreamLatency(latency));
    Ok((head, incoming))
}

/// The client's response: the upstream's head and streamed body, with
/// `usage` read on the way for calibration and the `x-foldgate-*` headers.
fn respond(
    app: &App,
    head: http::response::Parts,
    incoming: hyper::body::Incoming,
    prepared: &Prepared,
    model: String,
) -> Response<Body> {
    let sse = head
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let (tokens, raw) = (app.tokens.clone(), prepared.raw_tokens_out);
    let observe = Box::new(move |actual: u32| tokens.observe_usage(&model, raw, actual));
    let mut response = Response::from_parts(
        head,
        body::boxed(tap::UsageTap::new(incoming, sse, observe)),
    );
    prepared.annotate(response.headers_mut());
    response
}

/// Reads an upstream error body, bounded.
async fn read_bounded(incoming: hyper::body::Incoming) -> Result<Bytes, ApiError> {
    Limited::new(incoming, MAX_ERROR_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| ApiError::UpstreamUnreachable {
            provider: "upstream".into(),
            detail: format!("reading an error body: {e}"),
        })
}

impl Prepared {
    /// Sets the `x-foldgate-*` response headers.
    fn annotate(&self, headers: &mut http::HeaderMap) {
        headers.insert("x-foldgate-fold", HeaderValue::from_static(self.label));
        headers.insert("x-foldgate-tokens-in", HeaderValue::from(self.tokens_in));
        headers.insert("x-foldgate-tokens-out", HeaderValue::from(self.tokens_out));
        if let Some(w) = self
            .warning
            .as_deref()
            .and_then(|w| HeaderValue::from_str(w).ok())
        {
            headers.insert("x-foldgate-warning", w);
        }
    }
}
