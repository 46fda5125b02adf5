//! Chat completions (`POST /v1/chat/completions`): the messages are the
//! engine's messages, so decoding checks the body and takes them out of
//! it; the view's messages go back in as they are
//! ([`crate::api::codec::fill_messages`]).

use crate::api::codec::{Decoded, RoleErrors, model, object, take_array, with_roles};
use crate::error::ApiError;
use serde_json::{Map, Value};

/// Reads a chat body for the fold engine.
pub fn decode(bytes: &[u8]) -> Result<Decoded, ApiError> {
    let mut fields = parse(bytes)?;
    let messages = take_array(&mut fields, "messages");
    Ok(Decoded {
        fields,
        messages,
        pinned_ids: None,
        wire: None,
        estimate_fields: None,
        opaque: None,
    })
}

/// Parses and checks the body: a JSON object with a string `model` and an
/// array of message objects.
pub fn parse(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let map = object(bytes)?;
    model(&map)?;
    with_roles(&map, "messages", &ROLE_ERRORS)?;
    Ok(map)
}

/// OpenAI's words for a `messages` field without a `role` each.
const ROLE_ERRORS: RoleErrors = RoleErrors {
    item: "messages[{i}] must be an object with a string `role`",
    not_array: "`messages` must be an array",
    missing: "you must provide a `messages` parameter",
};
