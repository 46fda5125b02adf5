//! foldgate's own middleware: API-key auth, load shedding, and the access
//! log `TraceLayer` writes.

use crate::body::Body;
use crate::config::Secret;
use crate::error::{ApiError, ErrorLabel};
use crate::metrics::{Metrics, OTHER_ROUTE, RouteLabel};
use crate::upstream::UpstreamLatency;
use crate::upstream::headers;
use http::{Request, Response};
use http_body_util::BodyExt;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Semaphore;
use tower::{Layer, Service};
use tower_http::trace::OnResponse;
use tracing::Span;

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

/// Rejects requests without one of `server.api_keys` (when any are set).
/// `/foldgate/health` stays open for load balancers and health checks, and
/// the dashboard's static files for browsers (they hold no data; the
/// page's own fetches carry the key). On `/foldgate/*` the admin token
/// passes too (as a bearer credential, as the dashboard sends it); the
/// admin routes check what it may read.
#[derive(Clone)]
pub struct AuthLayer {
    keys: Arc<Vec<Secret>>,
    admin: Option<Arc<Secret>>,
}

impl AuthLayer {
    /// A layer accepting these keys (and, on foldgate's own routes, the
    /// admin token); an empty list accepts everyone.
    pub fn new(keys: Vec<Secret>, admin: Option<Secret>) -> Self {
        Self {
            keys: Arc::new(keys),
            admin: admin.map(Arc::new),
        }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            keys: self.keys.clone(),
            admin: self.admin.clone(),
        }
    }
}

/// See [`AuthLayer`].
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    keys: Arc<Vec<Secret>>,
    admin: Option<Arc<Secret>>,
}

impl<S, B> Service<Request<B>> for AuthService<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Response<Body>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let path = req.uri().path();
        if self.keys.is_empty() || path == "/foldgate/health" || crate::ui::is_ui(path) {
            return Box::pin(self.inner.call(req));
        }
        let offered = headers::credential(req.headers());
        let admin = path
            .starts_with("/foldgate/")
            .then_some(self.admin.as_deref())
            .flatten();
        let allowed =
            offered.is_some_and(|key| self.keys.iter().chain(admin).any(|k| k.matches(key)));
        if allowed {
            Box::pin(self.inner.call(req))
        } else {
            let message = if offered.is_some() {
                "invalid API key"
            } else {
                "missing API key"
            };
            let shape = crate::api::error_shape(req.method(), req.uri().path());
            Box::pin(async move { Ok(ApiError::Unauthorized(message).into_response_as(shape)) })
        }
    }
}

/// The access log, as `TraceLayer`'s response callback: one line per
/// request, inside the request's span (which carries its id, method and
/// path): status, upstream latency and foldgate's own overhead (time to the
/// response head minus the upstream's). A request that went upstream also
/// feeds the overhead and upstream latency histograms, under the route
/// label the handler set ([`RouteLabel`], else [`OTHER_ROUTE`]).
#[derive(Clone)]
pub struct AccessLog {
    metrics: Arc<Metrics>,
}

impl AccessLog {
    /// An access log recording into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<B> OnResponse<B> for AccessLog {
    fn on_response(self, response: &Response<B>, total: Duration, _: &Span) {
        let extensions = response.extensions();
        let upstream = extensions.get::<UpstreamLatency>().map(|u| u.0);
        let overhead = upstream.map_or(total, |u| total.saturating_sub(u));
        if let Some(upstream) = upstream {
            let route = extensions.get::<RouteLabel>().map_or(OTHER_ROUTE, |r| r.0);
            self.metrics.observe_request(route, total, upstream);
        }
        let error = extensions.get::<ErrorLabel>().map(|e| e.0);
        tracing::info!(
            target: "foldgate::access",
            status = response.status().as_u16(),
            upstream_ms = upstream.map(millis),
            overhead_ms = millis(overhead),
            error,
        );
    }
}

/// Milliseconds to the microsecond: `0.044`, not `0.043510999999999994`.
fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Load shedding: at most `limit` requests in flight, each counted until
/// its response body ends (a stream holds its slot while it streams);
/// beyond that, 503 with `Retry-After` at once rather than a queue.
/// `/foldgate/health` is never shed.
#[derive(Clone)]
pub struct ShedLayer {
    slots: Option<Arc<Semaphore>>,
}

impl ShedLayer {
    /// At most `limit` requests at once; 0 for no limit.
    pub fn new(limit: usize) -> Self {
        Self {
            slots: (limit > 0).then(|| Arc::new(Semaphore::new(limit))),
        }
    }
}

impl<S> Layer<S> for ShedLayer {
    type Service = ShedService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ShedService {
            inner,
            slots: self.slots.clone(),
        }
    }
}

/// See [`ShedLayer`].
#[derive(Clone)]
pub struct ShedService<S> {
    inner: S,
    slots: Option<Arc<Semaphore>>,
}

impl<S, B> Service<Request<B>> for ShedService<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Response<Body>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(slots) = &self.slots else {
            return Box::pin(self.inner.call(req));
        };
        if req.uri().path() == "/foldgate/health" {
            return Box::pin(self.inner.call(req));
        }
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            let shape = crate::api::error_shape(req.method(), req.uri().path());
            let mut response = ApiError::Overloaded.into_response_as(shape);
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
            return Box::pin(async move { Ok(response) });
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            let response = fut.await?;
            // The closure owns the permit: it is released when the body is dropped.
            Ok(response.map(|body| {
                crate::body::boxed(body.map_frame(move |frame| {
                    let _held = &permit;
                    frame
                }))
            }))
        })
    }
}
