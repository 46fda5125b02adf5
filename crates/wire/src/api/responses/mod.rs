//! OpenAI Responses (`POST /v1/responses`): `instructions` and leading
//! system/developer items are pinned; a call and its output are never
//! separated, nor a reasoning item from the item it precedes ([`codec`]);
//! recall speaks function-call items and the Responses stream
//! ([`recall`]).

pub mod codec;
pub mod recall;

use super::codec::{Decoded, RawRequest, Wire, object};
use super::{Codec, Endpoint, Provider};
use crate::config::Placement;
use crate::error::ApiError;
use crate::fold::view::Item;
use crate::usage::{UsageReader, UsageShape};
use serde_json::{Map, Value};

/// OpenAI Responses.
pub struct Responses;

impl Endpoint for Responses {
    fn name(&self) -> &'static str {
        "responses"
    }

    fn path(&self) -> &'static str {
        "/responses"
    }
}

impl Provider for Responses {
    /// OpenAI's: the providers chat completions go to.
    fn provider(&self) -> &'static str {
        "openai"
    }

    /// `usage.input_tokens` and `usage.output_tokens`, of the answer or of
    /// the `response` an event carries.
    fn usage(&self) -> UsageReader {
        const SHAPE: UsageShape = UsageShape {
            field: "usage",
            tokens: "input_tokens",
            added: &[],
            output: "output_tokens",
            within: &["response"],
            array: false,
        };
        UsageReader {
            key: b"\"usage\"",
            tokens: |data| SHAPE.tokens(data),
        }
    }
}

impl Codec for Responses {
    fn conversation_field(&self) -> &'static str {
        "input"
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

    fn fill_wire(
        &self,
        fields: &mut Map<String, Value>,
        _messages: &[Value],
        wire: &Wire,
        items: Vec<Item>,
    ) {
        fields.insert("input".into(), Value::Array(codec::encode(wire, items)));
    }

    /// The pinned head may be `instructions`, which cannot take a merge.
    fn placement(&self, configured: Placement) -> Placement {
        match configured {
            Placement::Merge => Placement::System,
            p => p,
        }
    }
}
