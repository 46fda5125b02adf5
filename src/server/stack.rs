//! The tower stack, built in one place.

use super::layers::{AccessLog, AuthLayer, ShedLayer};
use super::websocket::{self, FrameService};
use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::proxy;
use crate::telemetry::RequestSpans;
use bytes::Bytes;
use http::header::{HeaderName, PROXY_AUTHORIZATION};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use std::convert::Infallible;
use std::sync::Arc;
use tower::util::{BoxCloneService, Either};
use tower::{ServiceBuilder, ServiceExt};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

/// The service the listener runs for every request.
pub type AppService = BoxCloneService<Request<Incoming>, Response<Body>, Infallible>;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Builds the whole stack, outermost layer first:
///
/// 1. `CatchPanicLayer` — a panic anywhere below becomes a 500 envelope;
///    outermost so nothing escapes it.
/// 2. `SetRequestIdLayer` — sets `x-request-id` to a UUID when the client
///    sent none (servers such as llama.cpp's reject ids that are not UUIDs);
///    a client's own id passes through unchanged.
/// 3. `PropagateRequestIdLayer` — copies `x-request-id` to the response.
/// 4. `TraceLayer` — runs the request inside a `request` span carrying its
///    id, method and path, so every event it causes (folds, summarizer
///    calls, the access line) can be found from the id; below the request
///    id layer so the id exists. Its response callback is the access log
///    ([`AccessLog`]: one line per request, from the response extensions
///    `UpstreamLatency`, `RouteLabel` and `ErrorLabel`; it feeds the
///    overhead and upstream latency histograms); its other events are off.
/// 5. `SetSensitiveRequestHeadersLayer` — marks `proxy-authorization` and
///    every API's key header (`authorization`, `api-key`, `x-api-key`,
///    `x-goog-api-key`: [`crate::api::key_headers`]) sensitive so no log
///    prints them.
/// 6. `ShedLayer` — `server.max_concurrent_requests`: a request over the
///    limit gets 503 with `Retry-After` at once; a slot is held until the
///    response body ends. Inside the access log so shed requests are
///    logged, above auth so an overload costs nothing more.
/// 7. `AuthLayer` — `server.api_keys` (and the admin token on
///    `/foldgate/*`); inside the access log so rejected
///    requests are logged too.
/// 8. [`RequestSpans`], only with `[telemetry]` — a traced request's span
///    (under the client's `traceparent` if any), in force while the
///    request is handled and open until its body ends. Requests shed or
///    refused above are not traced.
/// 9. [`websocket::accept`] for a Responses WebSocket upgrade (its frames
///    then run through [`frames`]), else [`proxy::handle`] — admin routes
///    and forwarding; adds the response extensions above.
pub fn build(app: Arc<App>) -> AppService {
    let handler = {
        let app = app.clone();
        tower::service_fn(move |req: Request<Incoming>| {
            let app = app.clone();
            async move {
                let response = if websocket::claims(&req) {
                    websocket::accept(app.clone(), req, frames(app))
                } else {
                    proxy::handle(app, req).await
                };
                Ok::<_, Infallible>(response)
            }
        })
    };
    layered(&app, handler)
}

/// The stack of [`build`] over [`proxy::handle_frame`]: what a WebSocket
/// frame's request meets (request id, span and access line, shed, auth,
/// traces) is what an HTTP request meets.
pub fn frames(app: Arc<App>) -> FrameService {
    let handler = {
        let app = app.clone();
        tower::service_fn(move |req: Request<Full<Bytes>>| {
            let app = app.clone();
            async move { Ok::<_, Infallible>(proxy::handle_frame(app, req).await) }
        })
    };
    layered(&app, handler)
}

/// The layers of [`build`] around `handler`.
fn layered<B, H>(app: &App, handler: H) -> BoxCloneService<Request<B>, Response<Body>, Infallible>
where
    B: http_body::Body + Send + 'static,
    H: tower::Service<Request<B>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    H::Future: Send + 'static,
{
    let keys = app.config.server.api_keys.clone();
    let admin = app.config.server.admin_token.clone();
    let shed = app.config.server.max_concurrent_requests;
    let access_log = AccessLog::new(app.metrics.clone());
    // Traces' layer only when traces are on: off, the stack is as it was
    // without them.
    let handler = if crate::telemetry::enabled() {
        Either::Left(
            ServiceBuilder::new()
                .layer(RequestSpans)
                .service(handler)
                .map_response(|r: Response<_>| r.map(body::boxed)),
        )
    } else {
        Either::Right(handler)
    };
    let service = ServiceBuilder::new()
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal("the request handler panicked".into())
                .into_response_as(crate::api::own_error_shape())
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID, RandomIds))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(access_log)
                .on_body_chunk(())
                .on_eos(())
                .on_failure(()),
        )
        .layer(SetSensitiveRequestHeadersLayer::new(
            crate::api::key_headers()
                .iter()
                .cloned()
                .chain([PROXY_AUTHORIZATION]),
        ))
        .layer(ShedLayer::new(shed))
        .layer(AuthLayer::new(keys, admin))
        .service(handler)
        .map_response(|r: Response<_>| r.map(body::boxed));
    BoxCloneService::new(service)
}

/// Request ids: random version 4 UUIDs from `fastrand`'s generator per
/// thread, seeded once (tower-http's `MakeRequestUuid` asks the OS on every
/// request: a system call each). Ids, not secrets: unique and unguessed
/// enough to find a request's lines by.
#[derive(Clone, Copy)]
struct RandomIds;

impl MakeRequestId for RandomIds {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let bytes = fastrand::u128(..).to_le_bytes();
        let id = uuid::Builder::from_random_bytes(bytes).into_uuid();
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let text = id.hyphenated().encode_lower(&mut text);
        http::HeaderValue::from_str(text).ok().map(RequestId::new)
    }
}

/// The span every request runs in, for the log.
fn request_span<B>(req: &Request<B>) -> tracing::Span {
    let id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info_span!("request", request_id = id, method = %req.method(), path = req.uri().path())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        let request = Request::new(());
        (0..n)
            .filter_map(|_| RandomIds.make_request_id(&request))
            .filter_map(|id| Some(id.header_value().to_str().ok()?.to_owned()))
            .collect()
    }

    #[test]
    fn request_ids_are_distinct_version_4_uuids_across_threads() {
        let other = std::thread::spawn(|| ids(5_000));
        let mut all = ids(5_000);
        all.extend(other.join().unwrap_or_default());
        assert_eq!(all.len(), 10_000);
        for id in &all {
            let parsed = uuid::Uuid::try_parse(id).ok();
            assert_eq!(parsed.map(|u| u.get_version_num()), Some(4), "{id}");
        }
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 10_000, "no id repeats");
    }
}
