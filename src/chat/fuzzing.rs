//! Entry points for the fuzz targets in `fuzz/`: the chat body parsers,
//! which are private to this module. Not an API; hidden from the docs.

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
    super::fast::parse(bytes).map(|raw| FastChat {
        model: raw.model,
        rest: raw.rest,
        messages: raw.messages.iter().map(|m| m.get().to_string()).collect(),
    })
}

/// The full parser: the body as a JSON object, or the 400's message.
pub fn full_parse(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    super::request::parse(bytes).map_err(|e| e.to_string())
}
