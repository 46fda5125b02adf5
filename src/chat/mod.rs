//! The chat pipeline: intercepts `POST …/chat/completions`, applies or makes
//! a fold, forwards the view, and streams the answer back.
//!
//! parse → conversation key → state lookup → [`fold::plan`] → (fold under
//! the conversation's single-flight lock → summarizer → new state) →
//! forward (original bytes when the view equals the messages) → on a
//! context-length 400, one emergency fold and retry → response with
//! `x-foldgate-*` headers, usage read on the way for calibration.

mod context_error;
mod fast;

use fast::Route;
mod fold_run;
pub mod key;
mod tap;
mod turn;

pub use context_error::{ContextError, detect as detect_context_error};

use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::state::ConvKey;
use crate::upstream::UpstreamLatency;
use crate::upstream::{Provider, headers};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Instant;
use turn::{Prepared, Turn};

/// Largest upstream 400 body read to look for a context-length error.
const MAX_ERROR_BODY: usize = 1 << 20;

/// Whether foldgate intercepts this request.
pub fn is_chat(method: &Method, path: &str) -> bool {
    method == Method::POST && matches!(path, "/v1/chat/completions" | "/chat/completions")
}

/// Handles one chat completion whose body has been read.
pub async fn handle(
    app: &Arc<App>,
    parts: Parts,
    bytes: Bytes,
) -> Result<Response<Body>, ApiError> {
    Metrics::inc(&app.metrics.chat_requests);
    let (model, provider, key, mut route) = first_look(app, &parts.headers, &bytes).await?;
    let mut made = match &mut route {
        Route::Full(estimate) => estimate.take(),
        Route::Untouched(_) => None,
    };
    // The full pipeline, built when the fast path cannot decide alone.
    let mut full = || -> Result<(Map<String, Value>, Turn), ApiError> {
        let mut request = parse(&bytes)?;
        let estimate = made
            .take()
            .unwrap_or_else(|| app.tokens.estimate(&model, &request));
        let messages = match request.get_mut("messages").map(Value::take) {
            Some(Value::Array(messages)) => messages,
            _ => Vec::new(),
        };
        let turn = Turn::new(
            app.clone(),
            key.clone(),
            &provider.name,
            &parts.headers,
            &request,
            messages,
            estimate,
        );
        Ok((request, turn))
    };
    let mut slow: Option<(Map<String, Value>, Turn)> = None;
    let mut prepared = match route {
        Route::Untouched(prepared) => prepared,
        Route::Full(_) => {
            let (request, turn) = full()?;
            let prepared = turn.prepare().await?;
            slow = Some((request, turn));
            prepared
        }
    };
    let mut retried = false;
    loop {
        let body = match (&prepared.view, &mut slow) {
            (None, _) => bytes.clone(),
            (Some(view), Some((request, _))) => {
                request.insert("messages".into(), Value::Array(view.clone()));
                Bytes::from(
                    serde_json::to_vec(request).map_err(|e| ApiError::Internal(e.to_string()))?,
                )
            }
            (Some(_), None) => {
                return Err(ApiError::Internal("a view without a parsed request".into()));
            }
        };
        let mut req = Request::from_parts(parts.clone(), body::full(body.clone()));
        req.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        let started = Instant::now();
        let drop_auth = !app.config.server.api_keys.is_empty();
        let response = provider
            .send(req, app.config.server.upstream_timeout, drop_auth)
            .await?;
        let latency = started.elapsed();
        let (mut head, incoming) = response.into_parts();
        headers::to_client(&mut head.headers);
        head.extensions.insert(UpstreamLatency(latency));
        if head.status == StatusCode::BAD_REQUEST {
            let error_body = read_bounded(incoming).await?;
            if let (false, Some(err)) = (retried, context_error::detect(&error_body)) {
                retried = true;
                tracing::info!(
                    model,
                    window = err.window,
                    "upstream rejected the prompt as too long; folding and retrying once"
                );
                Metrics::inc(&app.metrics.reactive_folds);
                if let Some(window) = err.window {
                    app.tokens.record_discovered(&model, window);
                }
                let (_, turn) = match &mut slow {
                    Some(full) => full,
                    None => slow.insert(full()?),
                };
                turn.shrink_window(err.window.unwrap_or(u32::MAX).min(prepared.tokens_out));
                prepared = turn.prepare().await?;
                continue;
            }
            let mut response = Response::from_parts(head, body::full(error_body));
            prepared.annotate(response.headers_mut());
            return Ok(response);
        }
        return Ok(respond(app, head, incoming, &prepared, model));
    }
}

/// The model, its provider, the conversation key, and where the request goes.
async fn first_look(
    app: &App,
    headers: &http::HeaderMap,
    bytes: &[u8],
) -> Result<(String, Arc<Provider>, Option<ConvKey>, Route), ApiError> {
    if let Some(raw) = fast::parse(bytes) {
        let provider = app.upstreams.route(Some(&raw.model))?;
        let (key, route) = fast::route(app, headers, &raw, &provider.name).await?;
        return Ok((raw.model, provider, key, route));
    }
    // Not a plain request: the full parser reports what is wrong, or takes
    // it (the key then comes from the re-serialised messages).
    let request = parse(bytes)?;
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let key = key::conversation_key_of(headers, &request, &app.config.conversation);
    let provider = app.upstreams.route(Some(&model))?;
    Ok((model, provider, key, Route::Full(None)))
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

/// Parses and checks the body: a JSON object with a string `model` and an
/// array of message objects.
fn parse(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let bad =
        |message: String, param: Option<&'static str>| ApiError::BadRequest { message, param };
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| bad(format!("request body is not valid JSON: {e}"), None))?;
    let Value::Object(map) = value else {
        return Err(bad("request body must be a JSON object".into(), None));
    };
    match map.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        Some(_) => {
            return Err(bad(
                "`model` must be a non-empty string".into(),
                Some("model"),
            ));
        }
        None => {
            return Err(bad(
                "you must provide a `model` parameter".into(),
                Some("model"),
            ));
        }
    }
    match map.get("messages") {
        Some(Value::Array(messages)) => {
            if let Some(i) = messages
                .iter()
                .position(|m| !m.get("role").is_some_and(Value::is_string))
            {
                return Err(bad(
                    format!("messages[{i}] must be an object with a string `role`"),
                    Some("messages"),
                ));
            }
        }
        Some(_) => return Err(bad("`messages` must be an array".into(), Some("messages"))),
        None => {
            return Err(bad(
                "you must provide a `messages` parameter".into(),
                Some("messages"),
            ));
        }
    }
    Ok(map)
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
