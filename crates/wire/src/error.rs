//! Errors made by foldgate itself. Each becomes its route's API's error
//! envelope ([`ErrorShape`], from `crate::api::ApiSpec::error_shape`) in
//! one place, [`ApiError::into_response_as`], so the stack's error type
//! is `Infallible`.
//! Upstream errors are not `ApiError`s: they pass through unchanged.
//! Errors that stop the process before it serves are
//! [`crate::app::StartupError`]s: they belong to start-up, above the
//! engines they name.

use crate::body::{self, Body};
use http::{HeaderValue, Response, StatusCode, header};
use std::time::Duration;

/// An error answered by foldgate rather than the upstream.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed.
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<&'static str>,
    },
    /// The prompt cannot fit the model's window, even folded.
    #[error("{0}")]
    ContextLength(String),
    /// Missing or wrong credentials.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// No such route.
    #[error("no route for {0}")]
    NotFound(String),
    /// No fold state this credential may read for the conversation.
    #[error(
        "conversation `{0}` has no state for this credential: unknown, not folded yet, expired, or another tenant's"
    )]
    NoState(String),
    /// No provider lists the request's model.
    #[error("the model `{0}` does not exist: no provider lists it")]
    ModelNotFound(String),
    /// No provider speaks the request's API: a request is never sent to a
    /// provider of another API (its credential would cross with it).
    #[error(
        "no provider takes {api} requests (POST {path}); add one with api = \"{provider_api}\", e.g. [providers.{provider_api}] base_url = \"…\", api = \"{provider_api}\", models = [\"*\"]"
    )]
    NoProvider {
        /// The API that claimed the request.
        api: &'static str,
        /// The `api` setting a provider needs to take it.
        provider_api: &'static str,
        /// The request's path.
        path: String,
    },
    /// The body is larger than `server.max_body_bytes`.
    #[error("request body exceeds the limit of {limit} bytes (server.max_body_bytes)")]
    BodyTooLarge { limit: usize },
    /// The upstream could not be reached or dropped the connection.
    #[error("upstream {provider} unreachable: {detail}")]
    UpstreamUnreachable { provider: String, detail: String },
    /// The upstream answered, but with nothing foldgate can pass on: a
    /// recall round and its fallback both broke.
    #[error("upstream {provider} gave no usable answer: {detail}")]
    UpstreamBroken { provider: String, detail: String },
    /// The upstream did not answer in time.
    #[error("upstream {provider} did not answer within {after:?}")]
    UpstreamTimeout { provider: String, after: Duration },
    /// foldgate cannot serve the request right now (a fold that failed is
    /// [`ApiError::NotFolded`]).
    #[error("{0}")]
    Unavailable(String),
    /// A fold the request needed was tried and not made, with
    /// `on_failure = "error"`: `why` also goes in `x-foldgate-warning`.
    #[error("foldgate tried to fold the conversation and could not: {why}: {detail}")]
    NotFolded { why: String, detail: String },
    /// More requests are in flight than `server.max_concurrent_requests`.
    #[error("foldgate is at its limit of concurrent requests; retry shortly")]
    Overloaded,
    /// A bug or an unexpected condition.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The shape foldgate answers its own errors in on a route: the JSON
/// envelope its API writes an error as, given by the API
/// (`crate::api::ApiSpec::error_shape`; `crate::api::own_error_shape` on
/// routes no API claims).
#[derive(Clone, Copy)]
pub struct ErrorShape(pub fn(&ApiError) -> serde_json::Value);

impl std::fmt::Debug for ErrorShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ErrorShape")
    }
}

/// The short, low-cardinality label of an error, set as a response
/// extension so the access log and metrics can read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorLabel(pub &'static str);

impl ApiError {
    /// HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } | Self::ContextLength(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::NotFound(_)
            | Self::NoState(_)
            | Self::ModelNotFound(_)
            | Self::NoProvider { .. } => StatusCode::NOT_FOUND,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UpstreamUnreachable { .. } | Self::UpstreamBroken { .. } => {
                StatusCode::BAD_GATEWAY
            }
            Self::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Unavailable(_) | Self::NotFolded { .. } | Self::Overloaded => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The envelope's `code`, also the metrics label.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest { .. } => "invalid_request",
            Self::ContextLength(_) => "context_length_exceeded",
            Self::Unauthorized(_) => "invalid_api_key",
            Self::NotFound(_) => "not_found",
            Self::NoState(_) => "conversation_not_found",
            Self::ModelNotFound(_) => "model_not_found",
            Self::NoProvider { .. } => "provider_not_found",
            Self::BodyTooLarge { .. } => "request_too_large",
            Self::UpstreamUnreachable { .. } => "upstream_unreachable",
            Self::UpstreamBroken { .. } => "upstream_broken",
            Self::UpstreamTimeout { .. } => "upstream_timeout",
            Self::Unavailable(_) | Self::NotFolded { .. } => "unavailable",
            Self::Overloaded => "overloaded",
            Self::Internal(_) => "internal_error",
        }
    }

    /// Renders the error in `shape`, logging it once here.
    pub fn into_response_as(self, shape: ErrorShape) -> Response<Body> {
        let status = self.status();
        // A missing provider is the operator's to fix: said as loudly as a failure.
        if status.is_server_error() || matches!(self, Self::NoProvider { .. }) {
            tracing::warn!(code = self.code(), error = %self, "request failed");
        } else {
            tracing::debug!(code = self.code(), error = %self, "request rejected");
        }
        let envelope = (shape.0)(&self);
        let mut response = Response::new(body::full(envelope.to_string()));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Self::NotFolded { why, .. } = &self {
            if let Ok(value) = HeaderValue::from_str(&fold_failed(why)) {
                response
                    .headers_mut()
                    .insert(crate::headers::WARNING, value);
            }
        }
        if matches!(self, Self::Unauthorized(_)) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response.extensions_mut().insert(ErrorLabel(self.code()));
        response
    }
}

/// The `x-foldgate-warning` of a fold that was tried and not made.
pub fn fold_failed(why: &str) -> String {
    format!("fold failed: {why}")
}
