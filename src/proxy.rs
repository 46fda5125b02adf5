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
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;

/// Handles one request; errors become OpenAI envelopes here.
pub async fn handle(app: Arc<App>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    if path == "/foldgate" || path.starts_with("/foldgate/") {
        return crate::admin::handle(&app, req).await;
    }
    let shape = crate::api::error_shape(req.method(), path);
    forward(&app, req)
        .await
        .unwrap_or_else(|e| e.into_response_as(shape))
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
        let bytes = read_body(incoming, limit).await?;
        let label = RouteLabel(route.api.name());
        let mut response = pipeline::handle(app, route, parts, bytes).await?;
        response.extensions_mut().insert(label);
        return Ok(response);
    }
    let (provider, body) = if is_json_post(&parts.method, &parts.headers) {
        let bytes = read_body(incoming, limit).await?;
        app.metrics.unclaimed.check(parts.uri.path(), &bytes);
        let model = app.upstreams.route_by_model().then(|| model_of(&bytes));
        let provider = app.upstreams.route(model.flatten().as_deref())?;
        (provider, body::full(bytes))
    } else {
        (
            app.upstreams.route(None)?,
            body::boxed(Limited::new(incoming, limit)),
        )
    };
    let drop_client_auth = !app.config.server.api_keys.is_empty();
    let started = Instant::now();
    let response = provider
        .send(
            Request::from_parts(parts, body),
            app.config.server.upstream_timeout,
            drop_client_auth,
        )
        .await?;
    let latency = started.elapsed();
    let (mut parts, incoming) = response.into_parts();
    headers::to_client(&mut parts.headers);
    parts.extensions.insert(UpstreamLatency(latency));
    Ok(Response::from_parts(parts, body::boxed(incoming)))
}

/// Reads a whole request body, bounded by `limit`.
pub async fn read_body(incoming: Incoming, limit: usize) -> Result<Bytes, ApiError> {
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

/// The `model` field of a JSON body, if it has one. Unknown fields are
/// skipped without being built into values.
fn model_of(bytes: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct ModelOnly<'a> {
        #[serde(borrow)]
        model: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<ModelOnly>(bytes)
        .ok()?
        .model
        .map(|m| m.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_field() {
        assert_eq!(
            model_of(br#"{"messages":[],"model":"gpt-4o"}"#).as_deref(),
            Some("gpt-4o")
        );
        assert_eq!(model_of(br#"{"model":"a\"b"}"#).as_deref(), Some("a\"b"));
        assert_eq!(model_of(b"not json"), None);
        assert_eq!(model_of(br#"{"input":"x"}"#), None);
    }
}
