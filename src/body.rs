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
