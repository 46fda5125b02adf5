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

/// The recall tool's declaration: its name, description and parameters
/// schema under `schema` (`parameters`, Anthropic's `input_schema`).
pub fn declaration(schema: &str) -> Value {
    let mut tool = serde_json::json!({"name": RECALL_TOOL, "description": DESCRIPTION});
    tool[schema] = parameters();
    tool
}

/// Whether the request's `tool_choice` is unset or `auto`, as `auto`
/// reads it (`"auto"`, Anthropic's `{"type": "auto"}`).
pub fn auto_choice(fields: &Map<String, Value>, auto: fn(&Value) -> Option<&str>) -> bool {
    match fields.get("tool_choice") {
        None | Some(Value::Null) => true,
        Some(choice) => auto(choice) == Some("auto"),
    }
}

/// One result for each call, made by `result` from the call and its text.
pub fn each_result(
    calls: &[calls::Call],
    texts: Vec<String>,
    result: impl Fn(&calls::Call, String) -> Value,
) -> Vec<Value> {
    calls.iter().zip(texts).map(|(c, t)| result(c, t)).collect()
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
