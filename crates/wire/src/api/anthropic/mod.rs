//! Anthropic Messages (`POST /v1/messages`): `system` is pinned; a
//! `tool_use` and the `tool_result`s answering it are never separated; the
//! summary is appended to `system` ([`codec`]); recall speaks `tool_use`
//! blocks and Anthropic's stream events ([`recall`]).

pub mod codec;
pub mod recall;

pub use codec::CONTINUE_TEXT;

use super::codec::{Decoded, Fields, RawRequest, Wire, object};
use super::route::{self, Claim};
use super::spec::{self, ApiSpec, Framing, Keys, RecallSpec, SummaryPlace, Telemetry};
use super::summary::{SummaryAnswer, SummaryCall};
use super::{Codec, Fit, Provider, chat, context_error};
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use crate::usage::{UsageReader, UsageShape};
use serde_json::{Map, Value, json};

/// Its endpoint.
const PATH: &str = "/messages";

/// Anthropic Messages as data.
pub const SPEC: ApiSpec = ApiSpec {
    name: "anthropic",
    provider: "anthropic",
    path: PATH,
    claim: |path| route::endpoint(path, PATH).filter(|_| !path.contains("/threads/")),
    owns,
    model_in_path: false,
    conversation_field: "messages",
    keys: KEYS,
    usage: USAGE,
    usage_field: "usage",
    framing: Framing::Sse,
    error_shape: ErrorShape(error_envelope),
    error_event: recall::error_event,
    context_error: context_error::detect,
    format_errors: chat::FORMAT_ERRORS,
    summary: SummaryPlace::System,
    compresses_answers: false,
    answers_by_position: false,
    recall: RecallSpec {
        offered: true,
        keeps_tool: true,
        shapes: &Anthropic,
    },
    telemetry: Telemetry {
        operation: "chat",
        provider: "anthropic",
    },
};

/// `x-api-key: KEY`.
pub const KEYS: Keys = Keys {
    header: "x-api-key",
    bearer: false,
    ..spec::BEARER
};

/// `usage.input_tokens` with the cached prompt tokens Anthropic counts
/// apart, of the answer or of `message_start`'s `message`, and
/// `usage.output_tokens` (a stream's last in its `message_delta`).
pub const USAGE: UsageReader = UsageReader::of(b"\"usage\"", &USAGE_SHAPE);

/// Where [`USAGE`] reads.
const USAGE_SHAPE: UsageShape = UsageShape {
    added: &["cache_creation_input_tokens", "cache_read_input_tokens"],
    within: &["message"],
    ..UsageShape::of("usage", "input_tokens", "output_tokens")
};

/// `…/messages/count_tokens` and `…/messages/batches…`, not the
/// Assistants API's `…/threads/{thread}/messages`, which OpenAI-compatible
/// servers serve under the same last segment.
fn owns(path: &str) -> Option<Claim> {
    let at = path
        .find("/messages/")
        .filter(|_| !path.contains("/threads/"))?;
    Some(Claim {
        tail: at,
        model: None,
    })
}

/// Anthropic Messages.
pub struct Anthropic;

impl Provider for Anthropic {
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

    fn summary_answer(&self, answer: &Value) -> SummaryAnswer {
        summary_answer(answer)
    }
}

/// The first content block's text, `input_tokens` plus `output_tokens`, a
/// `max_tokens` stop.
pub fn summary_answer(answer: &Value) -> SummaryAnswer {
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

impl Codec for Anthropic {
    fn spec(&self) -> &'static ApiSpec {
        &SPEC
    }

    fn decode(&self, _path: Option<&str>, bytes: &[u8]) -> Result<Decoded, ApiError> {
        codec::decode(object(bytes)?)
    }

    fn fill_wire(&self, fields: &mut Fields, _: &[Value], wire: &Wire, items: Vec<Item>) {
        codec::encode(fields, wire, items);
    }

    fn unit_message(&self, unit: &[Value], _after_calls: bool) -> Value {
        codec::unit_message(unit)
    }

    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        codec::shallow(bytes)
    }

    /// A top-level `system`, or content blocks only Anthropic writes.
    fn fit(&self, body: &Map<String, Value>) -> Fit {
        codec::fit(body)
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
