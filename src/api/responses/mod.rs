//! OpenAI Responses (`POST /v1/responses`): `instructions` and leading
//! system/developer items are pinned; a call and its output are never
//! separated, nor a reasoning item from the item it precedes ([`codec`]);
//! recall speaks function-call items and the Responses stream
//! ([`recall`]).

pub mod codec;
pub mod recall;

use super::WireApi;
use super::codec::{Decoded, RawRequest, Wire, object};
use super::recall::calls::{Call, Calls, Carry};
use super::recall::stream::{self, Round};
use crate::config::Placement;
use crate::error::ApiError;
use crate::fold::view::Item;
use bytes::Bytes;
use serde_json::{Map, Value, json};

/// OpenAI Responses.
pub struct Responses;

impl WireApi for Responses {
    fn name(&self) -> &'static str {
        "responses"
    }

    fn path(&self) -> &'static str {
        "/responses"
    }

    /// OpenAI's: the providers chat completions go to.
    fn provider(&self) -> &'static str {
        "openai"
    }

    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        codec::shallow(bytes)
    }

    fn unit_message(&self, unit: &[Value]) -> Value {
        codec::engine_message(unit)
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
            Some(wire) => {
                fields.insert("input".into(), Value::Array(codec::encode(wire, items)));
            }
            None => super::chat::codec::fill(fields, messages, items),
        }
    }

    /// The pinned head may be `instructions`, which cannot take a merge.
    fn placement(&self, configured: Placement) -> Placement {
        match configured {
            Placement::Merge => Placement::System,
            p => p,
        }
    }

    fn conversation_field(&self) -> &'static str {
        "input"
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

    fn calls(&self, answer: &Value) -> Calls {
        recall::calls(answer)
    }

    fn answer_messages(&self, answer: &Value, _calls: &[Call]) -> Vec<Value> {
        recall::answer_items(answer)
    }

    fn results(&self, calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        recall::results(calls, texts)
    }

    fn hide(&self, answer: &mut Value) {
        recall::hide(answer);
    }

    fn stream_round(&self, last: bool, later: bool, carry: Carry) -> Box<dyn Round> {
        Box::new(recall::Round::new(last, later, carry))
    }

    fn bound_calls(&self, messages: &mut [Value]) {
        recall::bound(messages);
    }

    fn error_event(&self, message: &str) -> Bytes {
        stream::named_event(
            "error",
            &json!({"type": "error", "code": "server_error", "message": message}),
        )
    }
}
