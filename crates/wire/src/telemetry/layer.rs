//! The tower layer that starts a traced request's span and keeps its
//! context in force while the request is handled and its body streams.

use super::{Within, request, request_ended, within};
use http::{Request, Response};
use opentelemetry::trace::{Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, ready};

/// Starts the span of each traced request ([`super::traced`]), runs the
/// service below within it and ends it when the response body ends (or
/// is dropped). An untraced request passes as it came.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestSpans;

impl<S> tower::Layer<S> for RequestSpans {
    type Service = Spans<S>;

    fn layer(&self, inner: S) -> Spans<S> {
        Spans { inner }
    }
}

/// [`RequestSpans`]' service.
#[derive(Clone, Debug)]
pub struct Spans<S> {
    inner: S,
}

impl<S, B, R> tower::Service<Request<B>> for Spans<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
{
    type Response = Response<Traced<R>>;
    type Error = S::Error;
    type Future = Responding<S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let cx = request(req.headers(), req.method(), req.uri().path());
        let future = match &cx {
            Some(cx) => {
                let _attached = cx.clone().attach();
                self.inner.call(req)
            }
            None => self.inner.call(req),
        };
        Responding {
            inner: within(cx.clone(), future),
            cx,
        }
    }
}

pin_project! {
    /// [`Spans`]' future: the response, its body holding the span.
    pub struct Responding<F> {
        #[pin]
        inner: Within<F>,
        cx: Option<Context>,
    }

    impl<F> PinnedDrop for Responding<F> {
        // Dropped before its response (the client went): the request ends.
        fn drop(this: Pin<&mut Self>) {
            if let Some(cx) = this.project().cx.take() {
                request_ended(&cx);
            }
        }
    }
}

impl<F, R, E> Future for Responding<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = Result<Response<Traced<R>>, E>;

    fn poll(self: Pin<&mut Self>, task: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(task))?;
        let cx = this.cx.take();
        if let Some(cx) = &cx {
            let status = response.status();
            let span = cx.span();
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status.as_u16()),
            ));
            if status.is_server_error() {
                span.set_status(Status::error(status.to_string()));
            }
        }
        Poll::Ready(Ok(response.map(|body| Traced {
            body,
            _ends: Ends(cx),
        })))
    }
}

pin_project! {
    /// A response body that ends its request's span when it ends.
    pub struct Traced<B> {
        #[pin]
        body: B,
        _ends: Ends,
    }
}

/// Ends a request's span when dropped (with its body), whoever else holds
/// its context: a background fold the request started may outlive it.
pub struct Ends(Option<Context>);

impl Drop for Ends {
    fn drop(&mut self) {
        if let Some(cx) = &self.0 {
            cx.span().end();
            request_ended(cx);
        }
    }
}

impl<B: http_body::Body> http_body::Body for Traced<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        task: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        self.project().body.poll_frame(task)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
