//! Entry points for the fuzz targets in `fuzz/`: the chat body parsers
//! and every API's codec. Not an API; hidden from the docs.

use super::codec::{raw_pinned, raw_unit};
use crate::message::{MessageId, Role, makes_calls};
use serde_json::{Map, Value};

/// What the fast path read from a chat body.
#[derive(Debug)]
pub struct FastChat {
    /// The `model` field.
    pub model: String,
    /// The top-level fields the estimate reads.
    pub rest: Map<String, Value>,
    /// Each message as the client wrote it.
    pub messages: Vec<String>,
}

/// The fast path's shallow read (`None`: the full parser decides), when
/// the fast path keeps the body (each message read, with a string role).
pub fn fast_parse(bytes: &[u8]) -> Option<FastChat> {
    fast_read("chat", bytes)?;
    let chat: super::Api = &super::chat::Chat;
    let raw = chat.shallow(bytes)?;
    // UTF-8 each (`fast_read` read every message, which checks it).
    let messages = raw
        .items
        .iter()
        .map(|m| String::from_utf8(m.to_vec()).ok())
        .collect::<Option<_>>()?;
    Some(FastChat {
        model: raw.model,
        rest: raw.rest,
        messages,
    })
}

/// The full parser: the body as a JSON object, or the 400's message.
pub fn full_parse(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    super::chat::codec::parse(bytes).map_err(|e| e.to_string())
}

/// What a codec read from a body, for the codec fuzz target.
#[derive(Debug)]
pub struct CodecRead {
    /// The engine's messages (chat-completions form).
    pub messages: Vec<Value>,
    /// For each engine message, the wire items it stands for (`None`: a
    /// pinned top-level field); empty for chat completions.
    pub units: Vec<Option<std::ops::Range<usize>>>,
    /// How many conversation items the body has (chat: its messages).
    pub items: usize,
    /// The body encoded back from a view that keeps every message and adds
    /// nothing.
    pub reencoded: Value,
    /// Each engine message's identity.
    pub ids: Vec<MessageId>,
    /// Why the request goes upstream untouched, when it must.
    pub opaque: Option<&'static str>,
}

/// What the fast path reads of a body: its engine messages' identities
/// and why it goes untouched, as the pipeline's fast path reads them
/// (`None`: the decoder takes the body).
#[derive(Debug)]
pub struct FastRead {
    /// Each engine message's identity, pinned fields first.
    pub ids: Vec<MessageId>,
    /// Each engine message's role, likewise.
    pub roles: Vec<Role>,
    /// Why the request goes upstream untouched, when it must.
    pub opaque: Option<&'static str>,
}

/// Reads `bytes` as `api`'s fast path does (without the count cache).
pub fn fast_read(api: &str, bytes: &[u8]) -> Option<FastRead> {
    let api: super::Api = super::named(api).unwrap_or(&super::chat::Chat);
    let raw = api.shallow(bytes)?;
    let pinned = raw
        .pinned
        .iter()
        .map(|(name, field)| raw_pinned(name, field));
    let mut ids = Vec::new();
    let mut roles = Vec::new();
    for unit in pinned {
        let (message, id) = unit?;
        roles.push(Role::of(message.get("role")?.as_str()?));
        ids.push(id);
    }
    let mut units = Vec::new();
    raw.read_units(api, &mut units, |items, after_calls| {
        let (message, id) = raw_unit(api, items, after_calls)?;
        let calls = makes_calls(&message);
        Some(((Role::of(message.get("role")?.as_str()?), id), calls))
    })?;
    for (role, id) in units {
        roles.push(role);
        ids.push(id);
    }
    Some(FastRead {
        ids,
        roles,
        opaque: raw.opaque,
    })
}

/// Decodes `bytes` as `api` (`chat`, `anthropic`, `responses`) and encodes
/// the identity view back; `Err` is the 400's message.
pub fn codec(api: &str, bytes: &[u8]) -> Result<CodecRead, String> {
    use crate::fold::view::Item;
    let api: super::Api = super::named(api).unwrap_or(&super::chat::Chat);
    let mut decoded = api.decode(None, bytes).map_err(|e| e.to_string())?;
    let layout = (0..decoded.messages.len()).map(Item::Original).collect();
    let (units, items) = match &decoded.wire {
        Some(wire) => (wire.units.clone(), wire.items.len()),
        None => (Vec::new(), decoded.messages.len()),
    };
    let body = api
        .encode(
            &mut decoded.fields,
            &decoded.messages,
            decoded.wire.as_ref(),
            layout,
        )
        .map_err(|e| e.to_string())?;
    let reencoded = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let ids = decoded.ids();
    Ok(CodecRead {
        messages: decoded.messages,
        units,
        items,
        reencoded,
        ids,
        opaque: decoded.opaque,
    })
}
