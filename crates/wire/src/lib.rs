//! foldgate's wire: the APIs it speaks (chat completions, Anthropic
//! Messages, Responses, Gemini, Ollama), their framing, the usage they
//! report, the upstream client and its traces. Stands on `foldgate-core`
//! only (docs/architecture.md).
//!
//! - [`api`]: the wire formats, one folder each behind one trait,
//!   [`api::WireApi`].
//! - [`shallow`]: the one-pass JSON reader: a request's wanted fields
//!   parsed, the conversation's items and an object's members delimited.
//! - [`sse`]: server-sent events and NDJSON, split once.
//! - [`usage`]: the tokens an upstream response reports, read as it streams.
//! - [`upstream`]: the pooled HTTPS client, provider routing, header hygiene.
//! - [`body`]: the body type that crosses the stack.
//! - [`error`]: errors made by foldgate, in the route's API's error envelope.
//! - [`headers`]: the response headers foldgate adds to a conversation request.
//! - [`telemetry`]: OpenTelemetry traces over OTLP: the layer, the spans,
//!   `traceparent` in and out.

pub mod api;
pub mod body;
pub mod error;
pub mod headers;
pub mod shallow;
pub mod sse;
pub mod telemetry;
pub mod upstream;
pub mod usage;

use foldgate_core::{config, fold, message, tokens};
