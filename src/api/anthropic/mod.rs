//! Anthropic Messages (`POST /v1/messages`): `system` is pinned; a
//! `tool_use` and the `tool_result`s answering it are never separated; the
//! summary is appended to `system` ([`codec`]); recall speaks `tool_use`
//! blocks and Anthropic's stream events ([`recall`]).

pub mod codec;
pub mod recall;

pub use codec::CONTINUE_TEXT;

use super::WireApi;
use super::codec::{Decoded, RawRequest, Wire, object};
use super::recall::calls::{Call, Calls, Carry};
use super::recall::stream::{self, Round};
use super::route::{self, Claim};
use super::summary::SummaryCall;
use crate::config::Placement;
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use bytes::Bytes;
use http::HeaderName;
use serde_json::{Map, Value, json};

/// Anthropic Messages.
pub struct Anthropic;

impl WireApi for Anthropic {
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

    /// `{"type":"error","error":{"type","message"}}`.
    fn error_shape(&self) -> ErrorShape {
        ErrorShape(error_envelope)
    }

    fn provider(&self) -> &'static str {
        "anthropic"
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

    fn fill(
        &self,
        fields: &mut Map<String, Value>,
        messages: &[Value],
        wire: Option<&Wire>,
        items: Vec<Item>,
    ) {
        match wire {
            Some(wire) => codec::encode(fields, wire, items),
            None => super::chat::codec::fill(fields, messages, items),
        }
    }

    /// The summary can only go in `system`.
    fn placement(&self, _configured: Placement) -> Placement {
        Placement::System
    }

    fn recall_tool(&self) -> Value {
        recall::tool()
    }

    fn recall_offerable(&self, fields: &Map<String, Value>) -> bool {
        recall::offerable(fields)
    }

    fn remove_recall_tool(&self, fields: &mut Map<String, Value>) {
        super::recall::remove_tool(fields, recall::name_of);
    }

    /// Anthropic wants the tool defined while the history has a `tool_use`.
    fn keeps_recall_tool(&self) -> bool {
        true
    }

    fn calls(&self, answer: &Value) -> Calls {
        recall::calls(answer)
    }

    fn answer_messages(&self, answer: &Value, _calls: &[Call]) -> Vec<Value> {
        vec![recall::answer_message(answer)]
    }

    fn results(&self, calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        recall::results(calls, texts)
    }

    fn hide(&self, answer: &mut Value) {
        recall::hide(answer);
    }

    fn stream_round(&self, last: bool, later: bool, carry: Carry) -> Box<dyn Round> {
        Box::new(recall::Round::new(last, later, carry.shown))
    }

    fn bound_calls(&self, messages: &mut [Value]) {
        recall::bound(messages);
    }

    fn error_event(&self, message: &str) -> Bytes {
        stream::named_event(
            "error",
            &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
        )
    }

    fn place_recalled(&self, items: &mut Vec<Value>, block: &str) {
        recall::place_recalled(items, block);
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
