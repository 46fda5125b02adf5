//! The chat fast path's reader: a chat-completions body read shallowly,
//! its messages left as JSON text, for the pipeline to decide from
//! whether the request goes upstream untouched.

use crate::api::codec::RawRequest;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The fields the fast path reads; every other field is skipped unparsed.
#[derive(Deserialize)]
struct Shallow<'a> {
    model: Option<Value>,
    #[serde(borrow)]
    messages: Option<Vec<&'a RawValue>>,
    tools: Option<Value>,
    functions: Option<Value>,
    response_format: Option<Value>,
    max_tokens: Option<Value>,
    max_completion_tokens: Option<Value>,
}

/// Reads the body shallowly. `None` when it is not a plain, well-formed
/// chat request: the full parser then reports exactly what is wrong (or
/// handles the oddity, such as duplicate keys).
pub fn parse(bytes: &[u8]) -> Option<RawRequest<'_>> {
    // serde reads a struct from a JSON array too, and skips the strings of
    // unread fields without checking their UTF-8: neither body is JSON a
    // chat request can be (found by fuzzing).
    if bytes.trim_ascii_start().first() != Some(&b'{') || std::str::from_utf8(bytes).is_err() {
        return None;
    }
    let shallow: Shallow<'_> = serde_json::from_slice(bytes).ok()?;
    let model = match &shallow.model {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return None,
    };
    let mut rest = Map::new();
    let fields = [
        ("model", shallow.model),
        ("tools", shallow.tools),
        ("functions", shallow.functions),
        ("response_format", shallow.response_format),
        ("max_tokens", shallow.max_tokens),
        ("max_completion_tokens", shallow.max_completion_tokens),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            rest.insert(name.to_string(), value);
        }
    }
    Some(RawRequest {
        model,
        rest,
        messages: shallow.messages?,
    })
}
