//! The request handler behind the tower stack: admin routes, then
//! forwarding. JSON POST bodies are read (bounded) to route by `model`;
//! every other body streams through untouched.

use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::metrics::RouteLabel;
use crate::pipeline;
use crate::upstream::{UpstreamLatency, headers};
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::Instant;

/// Handles one request; errors become OpenAI envelopes here.
pub async fn handle(app: Arc<App>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    if path == "/foldgate" || path.starts_with("/foldgate/") {
        return crate::admin::handle(&app, req).await;
    }
    if crate::admin::compress::headroom::claims(req.method(), path) {
        return crate::admin::compress::headroom::handle(&app, req).await;
    }
    let shape = crate::api::error_shape(req.method(), path);
    forward(&app, req)
        .await
        .unwrap_or_else(|e| e.into_response_as(shape))
}

/// Handles the `POST` a Responses WebSocket frame became
/// (a Responses WebSocket's): a conversation request whose body is
/// read already, through the pipeline as [`handle`] sends one.
pub async fn handle_frame(app: Arc<App>, req: Request<Full<Bytes>>) -> Response<Body> {
    let shape = crate::api::error_shape(req.method(), req.uri().path());
    let (parts, body) = req.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    let limit = app.config.server.max_body_bytes;
    let answer = async {
        pipeline::key::check_header(&parts.headers, &app.config.conversation)?;
        if bytes.len() > limit {
            return Err(ApiError::BodyTooLarge { limit });
        }
        let route = crate::api::route(&parts.method, &parts.uri)
            .ok_or_else(|| ApiError::NotFound(parts.uri.path().to_string()))?;
        conversation(&app, route, parts, bytes).await
    };
    answer.await.unwrap_or_else(|e| e.into_response_as(shape))
}

/// A conversation request an API claims, its body read: through the
/// pipeline, labelled with its API for the access log and metrics.
async fn conversation(
    app: &Arc<App>,
    route: crate::api::Route,
    parts: http::request::Parts,
    bytes: Bytes,
) -> Result<Response<Body>, ApiError> {
    let label = RouteLabel(route.api.name());
    let mut response = pipeline::handle(app, route, parts, bytes).await?;
    response.extensions_mut().insert(label);
    Ok(response)
}

/// Forwards a request upstream and streams the answer back.
async fn forward(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let limit = app.config.server.max_body_bytes;
    let (parts, incoming) = req.into_parts();
    pipeline::key::check_header(&parts.headers, &app.config.conversation)?;
    if content_length(&parts.headers).is_some_and(|len| len > limit as u64) {
        return Err(ApiError::BodyTooLarge { limit });
    }
    if let Some(route) = crate::api::route(&parts.method, &parts.uri) {
        let bytes = pipeline::read_body(incoming, limit).await?;
        return conversation(app, route, parts, bytes).await;
    }
    let sibling = crate::api::sibling(&parts.uri);
    let (provider, body) = if is_json_post(&parts.method, &parts.headers) {
        let bytes = pipeline::read_body(incoming, limit).await?;
        let by_model = sibling.is_some() || app.upstreams.route_by_model();
        // One pass for the model and whether the body is a conversation.
        let peek = crate::unclaimed::peek(&bytes, by_model);
        if sibling.is_none() {
            app.metrics
                .unclaimed
                .check(parts.uri.path(), peek.conversation);
        }
        let model = peek.model.filter(|_| by_model);
        (
            provider_for(app, sibling.as_ref(), model, &parts)?,
            body::full(bytes),
        )
    } else {
        let provider = provider_for(app, sibling.as_ref(), None, &parts)?;
        (provider, body::boxed(Limited::new(incoming, limit)))
    };
    let drop_client_auth = !app.config.server.api_keys.is_empty();
    let timeout = app.config.server.upstream_timeout;
    let started = Instant::now();
    let response = match sibling {
        // Another endpoint of an API: its tail after the provider's base_url.
        Some(route) => {
            let mut req = Request::from_parts(parts, body);
            *req.uri_mut() = http::Uri::from(route.tail);
            provider.send_tail(req, timeout, drop_client_auth).await?
        }
        None => {
            let req = Request::from_parts(parts, body);
            provider.send(req, timeout, drop_client_auth).await?
        }
    };
    let latency = started.elapsed();
    let (mut parts, incoming) = response.into_parts();
    headers::to_client(&mut parts.headers);
    parts.extensions.insert(UpstreamLatency(latency));
    Ok(Response::from_parts(parts, body::boxed(incoming)))
}

/// The provider of a request that is not a conversation: for another
/// endpoint of an API (`sibling`), a provider of that API only (by the
/// path's model, else the body's); else by the body's model.
fn provider_for(
    app: &App,
    sibling: Option<&crate::api::Route>,
    model: Option<String>,
    parts: &http::request::Parts,
) -> Result<Arc<crate::upstream::Provider>, ApiError> {
    match sibling {
        Some(route) => {
            let model = route.model.clone().or(model).unwrap_or_default();
            app.upstreams.route_api(route.api, &model, parts.uri.path())
        }
        None => app.upstreams.route(model.as_deref()),
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn is_json_post(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::POST
        && headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"))
}
