//! Anthropic Messages (`POST /v1/messages`): `system` is pinned; a
//! `tool_use` and the `tool_result`s answering it are never separated; the
//! summary is appended to `system` ([`codec`]); recall speaks `tool_use`
//! blocks and Anthropic's stream events ([`recall`]).

pub mod codec;
pub mod recall;

pub use codec::CONTINUE_TEXT;

use super::codec::{Decoded, RawRequest, Wire, object};
use super::route::{self, Claim};
use super::summary::{SummaryAnswer, SummaryCall};
use super::{Codec, Endpoint, Fit, Provider};
use crate::config::Placement;
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use crate::usage::{UsageReader, UsageShape};
use http::HeaderName;
use serde_json::{Map, Value, json};

/// Anthropic Messages.
pub struct Anthropic;

impl Endpoint for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn path(&self) -> &'static str {
        "/messages"
    }

    /// Not the Assistants API's `…/threads/{thread}/messages`, which
    /// OpenAI-compatible servers serve under the same last segment.
    fn claim(&self, path: &str) -> Option<Claim> {
        route::endpoint(path, self.path()).filter(|_| !path.contains("/threads/"))
    }

    /// `…/messages/count_tokens` and `…/messages/batches…`.
    fn owns(&self, path: &str) -> Option<Claim> {
        let at = path
            .find("/messages/")
            .filter(|_| !path.contains("/threads/"))?;
        Some(Claim {
            tail: at,
            model: None,
        })
    }
}

impl Provider for Anthropic {
    /// `{"type":"error","error":{"type","message"}}`.
    fn error_shape(&self) -> ErrorShape {
        ErrorShape(error_envelope)
    }

    /// `usage.input_tokens` with the cached prompt tokens Anthropic counts
    /// apart, of the answer or of `message_start`'s `message`, and
    /// `usage.output_tokens` (a stream's last in its `message_delta`).
    fn usage(&self) -> UsageReader {
        const SHAPE: UsageShape = UsageShape {
            field: "usage",
            tokens: "input_tokens",
            added: &["cache_creation_input_tokens", "cache_read_input_tokens"],
            output: "output_tokens",
            within: &["message"],
            array: false,
        };
        UsageReader {
            key: b"\"usage\"",
            tokens: |data| SHAPE.tokens(data),
        }
    }

    /// `x-api-key: KEY`.
    fn key_header(&self, key: &str) -> (HeaderName, String) {
        (HeaderName::from_static("x-api-key"), key.to_string())
    }

    /// The system prompt in `system`, no `response_format` (the prompt
    /// asks for JSON).
    fn summary_body(&self, call: SummaryCall<'_>) -> Option<Value> {
        Some(json!({
            "model": call.model,
            "max_tokens": call.max_tokens,
            "system": call.system,
            "messages": [{ "role": "user", "content": call.user }],
        }))
    }

    /// The first content block's text, `input_tokens` plus
    /// `output_tokens`, a `max_tokens` stop.
    fn summary_answer(&self, answer: &Value) -> SummaryAnswer {
        let number = |path: &str| answer.pointer(path).and_then(Value::as_u64);
        SummaryAnswer {
            text: answer
                .pointer("/content/0/text")
                .and_then(Value::as_str)
                .map(str::to_string),
            tokens: number("/usage/input_tokens")
                .zip(number("/usage/output_tokens"))
                .map_or(0, |(i, o)| i + o),
            cut_off: answer.get("stop_reason").and_then(Value::as_str) == Some("max_tokens"),
        }
    }
}

impl Codec for Anthropic {
    /// A top-level `system`, or content blocks only Anthropic writes.
    fn fit(&self, body: &Map<String, Value>) -> Fit {
        codec::fit(body)
    }

    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        codec::shallow(bytes)
    }

    /// One message each; one without a string `role` has none (the
    /// decoder refuses it, so the fast path must not take it).
    fn unit_message(&self, unit: &[Value]) -> Value {
        unit.first()
            .filter(|m| m.get("role").is_some_and(Value::is_string))
            .map_or(Value::Null, codec::engine_message)
    }

    fn decode(&self, bytes: &[u8]) -> Result<Decoded, ApiError> {
        codec::decode(object(bytes)?)
    }

    fn fill_wire(
        &self,
        fields: &mut Map<String, Value>,
        _messages: &[Value],
        wire: &Wire,
        items: Vec<Item>,
    ) {
        codec::encode(fields, wire, items);
    }

    /// The summary can only go in `system`.
    fn placement(&self, _configured: Placement) -> Placement {
        Placement::System
    }
}

/// Anthropic's error envelope for one of foldgate's own errors.
fn error_envelope(error: &ApiError) -> Value {
    let kind = match error.status().as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        404 => "not_found_error",
        413 => "request_too_large",
        503 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": error.to_string()}})
}
