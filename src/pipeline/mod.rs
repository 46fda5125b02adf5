//! The conversation pipeline: takes a `POST` to a route an API in
//! [`crate::api`] serves, applies or makes a fold, forwards the view, and
//! streams the answer back. Each wire format is one
//! [`crate::api::WireApi`]; the pipeline names none of them.
//!
//! `ConvRequest::read` (the raw JSON: model, provider, conversation key,
//! estimate, the fold chain, read once) → untouched, or upgraded once to
//! the parsed form and its `FoldRequest` → [`crate::fold::plan`] → (fold
//! under the conversation's single-flight lock → summarizer → new state) →
//! forward (the client's bytes when the view is the messages unchanged) →
//! on a context-length 400, one emergency fold and retry → response with
//! `x-foldgate-*` headers, usage read on the way for calibration.

mod engine;
mod fast;
mod fold_run;
pub mod key;
mod prepared;
mod recall;
mod request;
mod tap;
mod turn;

use crate::api::{Api, Route};
use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::headers as names;
use crate::sse::Framing;
use crate::state::TurnFold;
use crate::upstream::UpstreamLatency;
use crate::upstream::{Provider, headers};
use bytes::Bytes;
pub use engine::{Compressed, compress};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Limited};
use prepared::Prepared;
pub(crate) use recall::sticky::Stickies;
use request::ConvRequest;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

/// Largest upstream 400 body read to look for a context-length error.
const MAX_ERROR_BODY: usize = 1 << 20;

/// Handles one conversation request whose body has been read: prepare the
/// view, send it, and on a context-length error fold once more and retry
/// once.
pub async fn handle(
    app: &Arc<App>,
    route: Route,
    mut parts: Parts,
    bytes: Bytes,
) -> Result<Response<Body>, ApiError> {
    let api = route.api;
    app.metrics.count_request(api.name());
    // From here on the request's URI is its tail: what goes after the
    // provider's `base_url`.
    let path = parts.uri.path().to_string();
    let tail: Arc<str> = Arc::from(route.tail.as_str());
    parts.uri = Uri::from(route.tail);
    let own = own_headers(api, &parts);
    let mut request = ConvRequest::read(app, api, &own, (path, tail), route.model, bytes).await?;
    let conversation = request.conversation_header();
    let tenant_and_id = request
        .key()
        .map(|k| (k.tenant.as_str(), k.conversation.as_str()));
    crate::telemetry::record_request(api, &request.model, tenant_and_id);
    let mut prepared = request.prepare(app, &own).await?;
    let mut retried = false;
    loop {
        let injected = inject(app, &request, &mut prepared).await;
        let recall = recall::Session::offer(app, &mut request, &mut prepared, &parts, &injected);
        let (head, incoming) = match &recall {
            Some(session) => send(app, &request.provider, session.parts(), session.body()?).await?,
            None => {
                let body = body_with_blocks(&mut request, &mut prepared, &injected)?;
                send(app, &request.provider, &parts, body).await?
            }
        };
        if head.status != StatusCode::BAD_REQUEST {
            let key = request.take_key();
            let mut response = match recall {
                Some(session) if head.status.is_success() => {
                    let observe = observed(app, &prepared, request.model);
                    // Boxed: the recall rounds' state is most of this future's size,
                    // moved on every request that never recalls.
                    Box::pin(session.respond(head, incoming, observe)).await?
                }
                _ => respond(app, request.api, head, incoming, &prepared, request.model),
            };
            annotate(app, &mut response, &prepared, conversation, key);
            return Ok(response);
        }
        let error_body = read_bounded(incoming).await?;
        if let Some(err) = request.api.context_error(&error_body).filter(|_| !retried) {
            retried = true;
            if smaller_view(app, &mut request, &own, &mut prepared, err).await? {
                continue;
            }
        }
        // Not a context-length error, or not one a smaller view answers:
        // the upstream's own answer goes back, annotated as this turn's.
        let mut answer = Response::from_parts(head, body::full(error_body));
        annotate(
            app,
            &mut answer,
            &prepared,
            conversation,
            request.take_key(),
        );
        return Ok(answer);
    }
}

/// The recall blocks of a folded chat's room, in their places: the blocks
/// earlier turns injected that still fit, then this turn's (its excerpts
/// and tokens counted into `prepared`).
async fn inject(
    app: &Arc<App>,
    request: &ConvRequest,
    prepared: &mut Prepared,
) -> Vec<recall::sticky::Placed> {
    let (mut injected, kept) = recall::inject::kept(app, request, prepared);
    recall::inject::fill(app, request, prepared);
    if !injected.is_empty() && !recall::inject::admit(request, prepared, kept) {
        injected.clear();
    }
    let injection = recall::inject::plan(app, request, prepared, &injected).await;
    if let Some(injection) = &injection {
        app.metrics.recall_injections.inc();
        prepared.injected = injection.excerpts;
        prepared.tokens_out = prepared.tokens_out.saturating_add(injection.tokens);
        prepared.raw_tokens_out = prepared.raw_tokens_out.saturating_add(injection.tokens);
        injected.push(recall::sticky::Placed {
            from_end: 0,
            text: Arc::from(injection.text.as_str()),
        });
    }
    injected
}

/// The body to forward without a recall round: the view, with the
/// injected blocks at their places.
fn body_with_blocks(
    request: &mut ConvRequest,
    prepared: &mut Prepared,
    injected: &[recall::sticky::Placed],
) -> Result<Bytes, ApiError> {
    if injected.is_empty() {
        return request.body(prepared);
    }
    let api = request.api;
    request.body_with(prepared, |fields| {
        if let Some(items) = api.conversation(fields) {
            let place = |items: &mut Vec<serde_json::Value>, text: &str| {
                api.recall().place_recalled(items, text);
            };
            recall::sticky::place(items, injected, &place);
        }
    })
}

/// After the upstream's context-length error `err`: learns what it says
/// of the window and prepares a smaller view into `prepared`. `true` when
/// there is one to send; `false` when there is none (`prepared` then
/// carries why, and the upstream's answer goes back).
async fn smaller_view(
    app: &Arc<App>,
    request: &mut ConvRequest,
    own: &HeaderMap,
    prepared: &mut Prepared,
    err: crate::api::ContextError,
) -> Result<bool, ApiError> {
    tracing::info!(
        model = %request.model,
        window = err.window,
        "upstream rejected the prompt as too long; folding and retrying once"
    );
    app.metrics.reactive_folds.inc();
    if let Some(window) = err.window {
        app.learn_window(&request.model, window).await;
    } else {
        // An error that names no window, for a model whose window
        // nothing named (or was bounded so): the rejected prompt's
        // size bounds it from above; each later rejection tightens it.
        let limits = app.tokens.limits_quiet(&request.model);
        let bounded = limits.source == crate::tokens::LimitSource::Learned;
        if !limits.known() || (bounded && prepared.tokens_out < limits.context_window) {
            app.learn_window(&request.model, prepared.tokens_out).await;
        }
    }
    // The rejected prompt is over the window in the upstream's
    // count, whatever foldgate's estimate of it was.
    let window = err.window.unwrap_or(u32::MAX).min(prepared.tokens_out);
    let rejected = prepared.tokens_out;
    match request
        .prepare_smaller(app, own, (window, err.window))
        .await
    {
        Ok(smaller) if smaller.fold == TurnFold::New || smaller.tokens_out < rejected => {
            *prepared = smaller;
            Ok(true)
        }
        // No smaller view: sending it again would only be
        // rejected again. The upstream's answer, and why.
        Ok(smaller) => {
            *prepared = smaller;
            let why = prepared
                .warning
                .take()
                .unwrap_or_else(|| crate::error::fold_failed("no smaller view could be made"));
            prepared.warning = Some(upstream_error_returned(&why));
            Ok(false)
        }
        // No view fits: the upstream's own answer, and why.
        Err(ApiError::ContextLength(why)) => {
            prepared.warning = Some(upstream_error_returned(&crate::error::fold_failed(&why)));
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The request's headers as the tenant and foldgate's own calls (the
/// summarizer's) read them: with the client's key from the query in its
/// API's key header when no header carries a key. What is forwarded keeps
/// the client's headers and query as they came.
fn own_headers(api: Api, parts: &Parts) -> Cow<'_, HeaderMap> {
    let key = parts.uri.query().and_then(|q| api.query_key(q));
    match key {
        Some(key) if headers::credential(&parts.headers).is_none() => {
            let (name, value) = api.key_header(key);
            let mut own = parts.headers.clone();
            if let Ok(mut value) = HeaderValue::from_str(&value) {
                value.set_sensitive(true);
                own.insert(name, value);
            }
            Cow::Owned(own)
        }
        _ => Cow::Borrowed(&parts.headers),
    }
}

/// Sends one attempt upstream; the response head is cleaned for the client
/// and carries the upstream's latency.
pub(super) async fn send(
    app: &App,
    provider: &Provider,
    parts: &Parts,
    body: Bytes,
) -> Result<(http::response::Parts, hyper::body::Incoming), ApiError> {
    let len = body.len();
    // The head without the client request's extensions: nothing upstream
    // reads them, and each would be cloned again for a retry.
    let mut req = Request::new(body::full(body));
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = parts.uri.clone();
    *req.headers_mut() = parts.headers.clone();
    req.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    let span = crate::telemetry::upstream(&provider.name);
    crate::telemetry::inject(span.as_ref(), req.headers_mut());
    let started = Instant::now();
    let drop_auth = !app.config.server.api_keys.is_empty();
    let sent = provider.send_tail(req, app.config.server.upstream_timeout, drop_auth);
    let response = crate::telemetry::within(span.clone(), sent).await?;
    crate::telemetry::record_status(span.as_ref(), response.status());
    let latency = started.elapsed();
    let (mut head, incoming) = response.into_parts();
    headers::to_client(&mut head.headers);
    head.extensions.insert(UpstreamLatency(latency));
    Ok((head, incoming))
}

/// The client's response: the upstream's head and streamed body, with
/// `usage` read on the way for calibration (the caller adds the headers).
fn respond(
    app: &App,
    api: Api,
    head: http::response::Parts,
    incoming: hyper::body::Incoming,
    prepared: &Prepared,
    model: String,
) -> Response<Body> {
    let framing = Framing::of(&head.headers);
    let observe = observed(app, prepared, model);
    Response::from_parts(
        head,
        body::boxed(tap::UsageTap::new(incoming, framing, api.usage(), observe)),
    )
}

/// Counts the forwarded request and returns what calibrates the token
/// estimate against the prompt tokens the upstream reports for it.
fn observed(app: &App, prepared: &Prepared, model: String) -> tap::OnUsage {
    app.metrics
        .observe_forwarded(prepared.tokens_in, prepared.tokens_out);
    let (tokens, raw) = (app.tokens.clone(), prepared.raw_tokens_out);
    let span = crate::telemetry::current();
    Box::new(move |reported: crate::usage::Reported| {
        if let Some(span) = &span {
            crate::telemetry::record_usage(span, reported);
        }
        if let Some(actual) = reported.prompt {
            tokens.observe_usage(&model, raw, actual);
        }
    })
}

/// Reads a whole request body, bounded by `limit`.
pub async fn read_body(incoming: hyper::body::Incoming, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(incoming, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::BodyTooLarge { limit })
        }
        Err(e) => Err(ApiError::BadRequest {
            message: format!("could not read the request body: {e}"),
            param: None,
        }),
    }
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

/// The warning of a turn whose context-length error goes back to the client.
fn upstream_error_returned(why: &str) -> String {
    format!("{why}; the upstream's context-length error is returned")
}

/// Sets the `x-foldgate-*` response headers: the fold label, how many
/// messages the view shows compressed (when any), tokens in and out, a
/// warning, and the conversation id used (a header's value or
/// a fingerprint), as the admin API names it; and records the turn for
/// the dashboard's chart when the conversation has a key.
fn annotate(
    app: &App,
    response: &mut Response<Body>,
    prepared: &Prepared,
    conversation: Option<HeaderValue>,
    key: Option<crate::state::ConvKey>,
) {
    crate::telemetry::record_view(&crate::telemetry::View {
        fold: prepared.fold.as_str(),
        tokens_in: prepared.tokens_in,
        tokens_out: prepared.tokens_out,
        stubs: prepared.compressed,
        injected: prepared.injected,
    });
    if let Some(key) = key {
        let tokens = (prepared.tokens_in, prepared.tokens_out);
        app.turns
            .record(key, tokens, prepared.fold, &prepared.view_ids);
    }
    let headers = response.headers_mut();
    headers.insert(
        names::FOLD,
        HeaderValue::from_static(prepared.fold.as_str()),
    );
    if prepared.compressed > 0 {
        headers.insert(names::COMPRESSED, HeaderValue::from(prepared.compressed));
    }
    if prepared.injected > 0 {
        headers.insert(names::RECALL_INJECTED, HeaderValue::from(prepared.injected));
    }
    headers.insert(names::TOKENS_IN, HeaderValue::from(prepared.tokens_in));
    headers.insert(names::TOKENS_OUT, HeaderValue::from(prepared.tokens_out));
    if let Some(w) = prepared
        .warning
        .as_deref()
        .and_then(|w| HeaderValue::from_str(w).ok())
    {
        headers.insert(names::WARNING, w);
    }
    if let Some(id) = conversation {
        headers.insert(names::CONVERSATION, id);
    }
}
