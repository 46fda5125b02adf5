//! The body type that crosses the stack, and constructors for it.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};

/// Boxed error used by bodies and the upstream client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every request and response body in foldgate: streamed, boxed once.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// A body holding `bytes` in one frame.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Boxes any body whose errors convert into [`BoxError`].
pub fn boxed<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A body fed by a task through the returned sender: each `Ok` is a data
/// frame; an `Err` ends the body with that error. Dropping the sender ends
/// it cleanly; the sender's `send` fails once the client has gone.
pub fn channel(capacity: usize) -> (tokio::sync::mpsc::Sender<Result<Bytes, BoxError>>, Body) {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    (tx, Channel { rx }.boxed_unsync())
}

struct Channel {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, BoxError>>,
}

impl http_body::Body for Channel {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        self.rx
            .poll_recv(cx)
            .map(|next| next.map(|r| r.map(http_body::Frame::data)))
    }
}
