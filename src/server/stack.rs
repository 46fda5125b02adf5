//! The tower stack, built in one place.

use super::layers::{AccessLog, AuthLayer, ShedLayer};
use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::proxy;
use http::header::{HeaderName, PROXY_AUTHORIZATION};
use http::{Request, Response};
use hyper::body::Incoming;
use std::convert::Infallible;
use std::sync::Arc;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
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
/// 5. `SetSensitiveRequestHeadersLayer` — marks `authorization`,
///    `proxy-authorization` and `x-api-key` sensitive so no log prints them.
/// 6. `ShedLayer` — `server.max_concurrent_requests`: a request over the
///    limit gets 503 with `Retry-After` at once; a slot is held until the
///    response body ends. Inside the access log so shed requests are
///    logged, above auth so an overload costs nothing more.
/// 7. `AuthLayer` — `server.api_keys` (and the admin token on
///    `/foldgate/*`); inside the access log so rejected
///    requests are logged too.
/// 8. [`proxy::handle`] — admin routes and forwarding; adds the response
///    extensions above.
pub fn build(app: Arc<App>) -> AppService {
    let keys = app.config.server.api_keys.clone();
    let admin = app.config.server.admin_token.clone();
    let shed = app.config.server.max_concurrent_requests;
    let access_log = AccessLog::new(app.metrics.clone());
    let handler = tower::service_fn(move |req: Request<Incoming>| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(proxy::handle(app, req).await) }
    });
    let service = ServiceBuilder::new()
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal("the request handler panicked".into()).into_response()
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
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

/// The span every request runs in.
fn request_span<B>(req: &Request<B>) -> tracing::Span {
    let id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info_span!("request", request_id = id, method = %req.method(), path = req.uri().path())
}
