//! What every API's recall round shares: the tool's description and
//! schema, the calls of an answer ([`calls`]), a call's query bounded
//! ([`input`]), and the reading of a streamed round ([`stream`]). Each API
//! shapes these in its own `recall.rs`; the rounds run in the pipeline.

pub mod calls;
pub mod input;
pub mod stream;

use crate::message::RECALL_TOOL;
use serde_json::{Map, Value, json};

/// What the tool says it does, to the model.
pub const DESCRIPTION: &str = "Look up earlier messages of this conversation that were folded out of view \
                           (they are archived verbatim). Returns the best-matching passages with their \
                           turn and role. Use it when you need an exact detail the summary lacks.";

/// The tool's parameters, as a JSON schema.
pub fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words, identifiers, paths or a tool call id to search for"
            }
        },
        "required": ["query"]
    })
}

/// Whether the request's `tools` has one that `name` calls the recall tool.
pub fn has_tool(fields: &Map<String, Value>, name: impl Fn(&Value) -> Option<&str>) -> bool {
    fields
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| tools.iter().any(|t| name(t) == Some(RECALL_TOOL)))
}

/// Appends `tool` to the request's `tools`.
pub fn push_tool(fields: &mut Map<String, Value>, tool: Value) {
    match fields.get_mut("tools") {
        Some(Value::Array(tools)) => tools.push(tool),
        _ => {
            fields.insert("tools".into(), Value::Array(vec![tool]));
        }
    }
}

/// Takes the recall tool (named by `name`) out of the request's `tools`;
/// `tools` goes when it was the only one.
pub fn remove_tool(fields: &mut Map<String, Value>, name: impl Fn(&Value) -> Option<&str>) {
    if let Some(Value::Array(tools)) = fields.get_mut("tools") {
        tools.retain(|t| name(t) != Some(RECALL_TOOL));
        if tools.is_empty() {
            fields.remove("tools");
        }
    }
}

/// Inserts recalled excerpts as a user message of their own right before
/// the last user message (item) of `items`.
pub fn before_last_user(items: &mut Vec<Value>, block: &str) {
    let is_user = |m: &Value| m.get("role").and_then(Value::as_str) == Some("user");
    if let Some(at) = items.iter().rposition(is_user) {
        items.insert(at, json!({"role": "user", "content": block}));
    }
}
