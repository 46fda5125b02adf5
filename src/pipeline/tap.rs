//! A response body wrapper that reads `usage` on the way through, without
//! holding back a single chunk.

use crate::body::BoxError;
use crate::sse::Framing;
use crate::usage::{Reported, UsageReader, UsageScanner};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Called once with the tokens the upstream reported, if it reported any.
pub type OnUsage = Box<dyn FnOnce(Reported) + Send>;

pin_project_lite::pin_project! {
    /// Passes every frame through unchanged while feeding data to a
    /// [`UsageScanner`]; at the end of the body, reports the usage found.
    pub struct UsageTap<B> {
        #[pin]
        inner: B,
        scanner: Option<UsageScanner>,
        on_usage: Option<OnUsage>,
    }
}

impl<B> UsageTap<B> {
    /// Wraps `inner`; `framing` says how its events are delimited when it
    /// is a stream, `reader` how its API reports usage.
    pub fn new(inner: B, framing: Option<Framing>, reader: UsageReader, on_usage: OnUsage) -> Self {
        Self {
            inner,
            scanner: Some(UsageScanner::framed(framing, reader)),
            on_usage: Some(on_usage),
        }
    }
}

impl<B> Body for UsageTap<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(scanner)) = (frame.data_ref(), this.scanner.as_mut()) {
                    scanner.feed(data);
                }
                // hyper stops polling once a body says it has ended.
                this.inner.is_end_stream()
            }
            Poll::Ready(None) => true,
            _ => false,
        };
        if ended {
            let found = this.scanner.take().map(UsageScanner::finish);
            let found = found.filter(|found| !found.is_empty());
            if let (Some(tokens), Some(report)) = (found, this.on_usage.take()) {
                report(tokens);
            }
        }
        polled.map(|o| o.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
