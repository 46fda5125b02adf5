//! One retry of a request the upstream dropped before answering anything:
//! the race of a pooled keep-alive connection that the server closes just
//! as foldgate reuses it. hyper-util's pool already retries a request it
//! had not started writing (`retry_canceled_requests`); once written, the
//! same race surfaces as "connection closed before message completed" (or
//! a reset), which this module retries once on a new connection. Only a
//! body that is whole in memory (every chat body, every JSON body foldgate
//! routes by `model`, every empty body) can be sent again; a body still
//! streaming from the client is sent once.

use super::HttpClient;
use crate::body::{self, Body, BoxError};
use bytes::Bytes;
use http::Request;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A request body, as far as a retry is concerned.
pub enum Payload {
    /// Whole in memory: can be sent again.
    Whole(Bytes),
    /// Still arriving from the client: can be sent once.
    Streaming(Body),
}

impl Payload {
    /// Takes a body's bytes when they are already whole in memory, polling
    /// it once without waiting. A body that is not complete on that one
    /// poll stays a stream, with the frame already taken put back first.
    pub fn of(mut body: Body) -> Self {
        if body.is_end_stream() {
            return Self::Whole(Bytes::new());
        }
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Pending => Self::Streaming(body),
            Poll::Ready(None) => Self::Whole(Bytes::new()),
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if body.is_end_stream() => Self::Whole(data),
                Ok(data) => Self::Streaming(Prepend::body(Ok(Frame::data(data)), body)),
                Err(frame) => Self::Streaming(Prepend::body(Ok(frame), body)),
            },
            Poll::Ready(Some(Err(e))) => Self::Streaming(Prepend::body(Err(e), body)),
        }
    }
}

/// Sends the request, and once more on a new connection when the upstream
/// dropped the first before answering and the body can be sent again.
pub async fn send(
    client: &HttpClient,
    provider: &str,
    req: Request<Body>,
) -> Result<hyper::Response<Incoming>, hyper_util::client::legacy::Error> {
    let (parts, body) = req.into_parts();
    let bytes = match Payload::of(body) {
        Payload::Streaming(body) => return client.request(Request::from_parts(parts, body)).await,
        Payload::Whole(bytes) => bytes,
    };
    let first = Request::from_parts(parts.clone(), body::full(bytes.clone()));
    match client.request(first).await {
        Err(e) if dropped_before_answer(&e) => {
            tracing::info!(provider, error = %error_chain(&e), "upstream dropped the connection before answering; retrying once on a new connection");
            client
                .request(Request::from_parts(parts, body::full(bytes)))
                .await
        }
        other => other,
    }
}

/// Whether the upstream closed or reset the connection before any byte of
/// its answer arrived, including a reset while connecting (nothing was
/// sent then). A refused or timed-out connect is not retried: the upstream
/// is down, and a second try only doubles the client's wait.
pub fn dropped_before_answer(err: &hyper_util::client::legacy::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
            return matches!(io.kind(), ConnectionReset | ConnectionAborted | BrokenPipe);
        }
        source = e.source();
    }
    false
}

/// An error and its sources, joined by `: `.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

pin_project_lite::pin_project! {
    /// A body whose first frame was already taken, put back in front.
    struct Prepend {
        first: Option<Result<Frame<Bytes>, BoxError>>,
        #[pin]
        rest: Body,
    }
}

impl Prepend {
    fn body(first: Result<Frame<Bytes>, BoxError>, rest: Body) -> Body {
        body::boxed(Self {
            first: Some(first),
            rest,
        })
    }
}

impl http_body::Body for Prepend {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        match this.first.take() {
            Some(first) => Poll::Ready(Some(first)),
            None => this.rest.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.size_hint();
        let first = match &self.first {
            Some(Ok(frame)) => frame.data_ref().map_or(0, |d| d.len() as u64),
            _ => 0,
        };
        // Upper before lower: `SizeHint` refuses a lower bound above the upper.
        let mut hint = SizeHint::new();
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + first);
        }
        hint.set_lower(rest.lower() + first);
        hint
    }
}
