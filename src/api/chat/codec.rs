//! Chat completions (`POST /v1/chat/completions`): the messages are the
//! engine's messages, so decoding checks the body and takes them out of
//! it, and encoding lays the view's messages back in.

use crate::api::codec::{Decoded, take_array};
use crate::error::ApiError;
use crate::fold::view::{self, Item};
use serde_json::{Map, Value};

/// Reads a chat body for the fold engine.
pub fn decode(bytes: &[u8]) -> Result<Decoded, ApiError> {
    let mut fields = parse(bytes)?;
    let messages = take_array(&mut fields, "messages");
    Ok(Decoded {
        fields,
        messages,
        ids: None,
        wire: None,
        estimate_fields: None,
        opaque: None,
    })
}

/// `fields` with the view of `messages` laid out by the fold engine.
pub fn fill(fields: &mut Map<String, Value>, messages: &[Value], items: Vec<Item>) {
    let view = view::materialize(messages, items);
    fields.insert("messages".into(), Value::Array(view));
}

/// Parses and checks the body: a JSON object with a string `model` and an
/// array of message objects.
pub fn parse(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let bad =
        |message: String, param: Option<&'static str>| ApiError::BadRequest { message, param };
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| bad(format!("request body is not valid JSON: {e}"), None))?;
    let Value::Object(map) = value else {
        return Err(bad("request body must be a JSON object".into(), None));
    };
    match map.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        Some(_) => {
            return Err(bad(
                "`model` must be a non-empty string".into(),
                Some("model"),
            ));
        }
        None => {
            return Err(bad(
                "you must provide a `model` parameter".into(),
                Some("model"),
            ));
        }
    }
    match map.get("messages") {
        Some(Value::Array(messages)) => {
            if let Some(i) = messages
                .iter()
                .position(|m| !m.get("role").is_some_and(Value::is_string))
            {
                return Err(bad(
                    format!("messages[{i}] must be an object with a string `role`"),
                    Some("messages"),
                ));
            }
        }
        Some(_) => return Err(bad("`messages` must be an array".into(), Some("messages"))),
        None => {
            return Err(bad(
                "you must provide a `messages` parameter".into(),
                Some("messages"),
            ));
        }
    }
    Ok(map)
}
