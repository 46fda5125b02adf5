//! Entry points for the fuzz targets in `fuzz/`: the chat body parsers
//! and every API's codec. Not an API; hidden from the docs.

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

/// The fast path's shallow read (`None`: the full parser decides).
pub fn fast_parse(bytes: &[u8]) -> Option<FastChat> {
    super::chat::shallow::parse(bytes).map(|raw| FastChat {
        model: raw.model,
        rest: raw.rest,
        messages: raw.messages.iter().map(|m| m.get().to_string()).collect(),
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
}

/// Decodes `bytes` as `api` (`chat`, `anthropic`, `responses`) and encodes
/// the identity view back; `Err` is the 400's message.
pub fn codec(api: &str, bytes: &[u8]) -> Result<CodecRead, String> {
    use crate::fold::view::Item;
    let api: super::Api = super::named(api).unwrap_or(&super::chat::Chat);
    let mut decoded = api.decode(bytes).map_err(|e| e.to_string())?;
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
    Ok(CodecRead {
        messages: decoded.messages,
        units,
        items,
        reencoded,
    })
}
