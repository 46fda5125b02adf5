//! Why one summarizer model gave no summary: the per-model errors that
//! [`super::SummarizeError`] lists, one per target tried.

use http::StatusCode;
use std::time::Duration;

/// Why a call to one summarizer model, or the model as a whole, failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum CallError {
    /// The target's provider speaks no API with a summarizer call.
    #[error("provider {0} speaks no API that carries summarizer calls")]
    NoApi(String),
    /// The call could not be built.
    #[error(transparent)]
    Request(#[from] http::Error),
    /// The provider could not be reached (as the proxy would answer it).
    #[error(transparent)]
    Send(#[from] foldgate_wire::error::ApiError),
    /// The answer broke off while it was read.
    #[error(transparent)]
    Body(#[from] hyper::Error),
    /// No answer within `summarizer.timeout`.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// A successful status with a body that is not JSON.
    #[error("answer is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// A successful status without assistant text (the body's start).
    #[error("answer has no message content: {0}")]
    NoContent(String),
    /// An error status (with the body's start).
    #[error("status {status}: {body}")]
    Status { status: StatusCode, body: String },
    /// Every request format was tried and rejected.
    #[error("the model rejects every request format")]
    EveryFormatRejected,
    /// The answer could not be read as a summary.
    #[error("{0}")]
    Unusable(String),
    /// The last failure, once retries ran out.
    #[error("{failure} (after {calls} attempts)")]
    GaveUp { failure: Box<CallError>, calls: u32 },
    /// No messages to summarize.
    #[error("nothing to summarize")]
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_before() {
        let status = CallError::Status {
            status: StatusCode::BAD_GATEWAY,
            body: "oops".into(),
        };
        assert_eq!(status.to_string(), "status 502 Bad Gateway: oops");
        let gave_up = CallError::GaveUp {
            failure: Box::new(CallError::Timeout(Duration::from_secs(2))),
            calls: 3,
        };
        assert_eq!(gave_up.to_string(), "timed out after 2s (after 3 attempts)");
    }
}
