//! OpenAI Responses (`POST /v1/responses`).
//!
//! - `instructions` is pinned (one engine message that stays in its
//!   field), and so are leading `system`/`developer` items.
//! - A unit is one item, except that a `reasoning` item joins the item it
//!   precedes and consecutive calls (`function_call`, `custom_tool_call`,
//!   …) form one assistant message with several tool calls; an output
//!   (`function_call_output`, …) is a tool message paired by `call_id`.
//! - A request with `previous_response_id` or `conversation` keeps its
//!   history upstream, and a string `input` is a single message: both go
//!   upstream untouched.
//! - The summary is a message item of its own, after the pinned items.
//! - An item of a type this codec does not read (Codex's
//!   `additional_tools` and `configuration_update`, a `compaction`, an
//!   `item_reference`, whatever comes next) is an opaque developer
//!   message: pinned when it leads, a pin later, never summarized
//!   ([`crate::message::OPAQUE`]); its bytes go upstream unchanged.

use super::{Responses, SPEC};
use crate::api::codec::{
    Decoded, Fields, RawRequest, Units, Wire, bad, estimate_fields, model, object, take_array,
    text_of, tool_call,
};
use crate::api::{ApiSpec, Codec};
use crate::error::ApiError;
use crate::fold::view::Item;
use crate::message::{OPAQUE, role};
use crate::shallow::{self, Spec};
use serde_json::{Value, json};

/// The fields that, set, say the history is held upstream.
const HELD_UPSTREAM: [&str; 2] = ["previous_response_id", "conversation"];

impl Codec for Responses {
    fn spec(&self) -> &'static ApiSpec {
        &SPEC
    }

    /// Reads a Responses body.
    fn decode(&self, _path: Option<&str>, bytes: &[u8]) -> Result<Decoded, ApiError> {
        let mut fields = object(bytes)?;
        let model = model(&fields)?;
        let held_upstream = HELD_UPSTREAM
            .iter()
            .any(|k| fields.get(*k).is_some_and(|v| !v.is_null()));
        let mut opaque = held_upstream.then_some(shallow::HELD_UPSTREAM);
        let items = match fields.get("input") {
            Some(Value::Array(_)) => take_array(&mut fields, "input"),
            Some(Value::String(text)) => {
                opaque = opaque.or(Some("a single input message"));
                vec![json!({"role": "user", "content": text})]
            }
            Some(_) => return Err(bad("`input` must be a string or an array", Some("input"))),
            None => return Err(bad("you must provide an `input` parameter", Some("input"))),
        };
        if let Some(i) = items.iter().position(|item| !item.is_object()) {
            return Err(bad(&format!("input[{i}] must be an object"), Some("input")));
        }
        let mut units = Units::default();
        units.pin("instructions", fields.get("instructions"));
        let shapes: Vec<Shape> = items.iter().map(shape).collect();
        for range in unit_ranges(&shapes) {
            units.push(engine_message(&items[range.clone()]), range);
        }
        let estimate = estimate_fields(&fields, model, "parameters", "max_output_tokens");
        Ok(units.decoded(fields, items, estimate, opaque))
    }

    /// Reads a Responses body shallowly, for the fast path: its items grouped
    /// into units as the decoder groups them (`None`: a string `input`, or a
    /// body the decoder must judge).
    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        let fields = shallow::read(bytes, &SHALLOW)?;
        let shapes = fields
            .members
            .iter()
            .map(raw_shape)
            .collect::<Option<Vec<_>>>()?;
        let mut raw =
            RawRequest::from_fields(fields, &SHALLOW, Some(("parameters", "max_output_tokens")))?;
        raw.units = unit_ranges(&shapes);
        Some(raw)
    }

    /// The `input` items of the view; foldgate's own messages become message
    /// items where the layout puts them.
    fn fill_wire(&self, fields: &mut Fields, _: &[Value], wire: &Wire, items: Vec<Item>) {
        let input = wire.render(items, |made| {
            let role = role(&made).unwrap_or("system").to_string();
            Some(json!({"role": role, "content": text_of(&made["content"])}))
        });
        fields.insert("input".into(), Value::Array(input));
    }

    fn unit_message(&self, unit: &[Value], _after_calls: bool) -> Value {
        engine_message(unit)
    }
}

fn kind(item: &Value) -> &str {
    item.get("type")
        .and_then(Value::as_str)
        .unwrap_or(if item.get("role").is_some() {
            "message"
        } else {
            ""
        })
}

/// A call that an output item answers by `call_id`.
fn is_call(item: &Value) -> bool {
    shape(item) == Shape::Call
}

fn is_output(item: &Value) -> bool {
    kind(item).ends_with("_call_output")
}

/// What grouping items into units reads of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Reasoning,
    /// A call (`*_call`) with a string `call_id` an output answers.
    Call,
    Other,
}

impl Shape {
    fn of(kind: &str, string_call_id: bool) -> Self {
        match kind {
            "reasoning" => Self::Reasoning,
            k if k.ends_with("_call") && string_call_id => Self::Call,
            _ => Self::Other,
        }
    }
}

fn shape(item: &Value) -> Shape {
    Shape::of(
        kind(item),
        item.get("call_id").is_some_and(Value::is_string),
    )
}

/// An item's [`Shape`] from its top-level members, delimited as the
/// fast path's reader delimits the items (`None`: a field [`Shape`] reads
/// named twice or not of the type the decoder reads). The item is read in
/// full when its text is first seen.
fn raw_shape(members: &shallow::Members<'_>) -> Option<Shape> {
    let field = |name: &str| {
        let mut named = members.iter().filter(|(key, _)| key == name);
        match (named.next(), named.next()) {
            (_, Some(_)) => Err(()),
            (first, None) => Ok(first.map(|(_, value)| *value)),
        }
    };
    let kind = match field("type").ok()? {
        Some(text) => serde_json::from_slice::<Option<String>>(text).ok()?,
        None => None,
    };
    let role = field("role").ok()?.is_some();
    let string_call_id = field("call_id").ok()?.is_some_and(|c| c.starts_with(b"\""));
    let kind = match (&kind, role) {
        (Some(kind), _) => kind.as_str(),
        (None, true) => "message",
        (None, false) => "",
    };
    Some(Shape::of(kind, string_call_id))
}

/// What the fast path reads of a Responses body: the fields the estimate
/// reads and those that say the history is held upstream, `instructions`
/// and the input items as text.
const SHALLOW: Spec = Spec {
    parsed: &[
        "model",
        "tools",
        "max_output_tokens",
        "previous_response_id",
        "conversation",
    ],
    raw: &["instructions"],
    items: "input",
    held_upstream: &HELD_UPSTREAM,
    item_members: true,
};

/// The items of each unit, in order.
fn unit_ranges(shapes: &[Shape]) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::with_capacity(shapes.len());
    let mut i = 0;
    while i < shapes.len() {
        let start = i;
        while shapes[i] == Shape::Reasoning && i + 1 < shapes.len() {
            i += 1;
        }
        if shapes[i] == Shape::Call {
            while i + 1 < shapes.len()
                && (shapes[i + 1] == Shape::Call
                    || shapes[i + 1] == Shape::Reasoning && shapes.get(i + 2) == Some(&Shape::Call))
            {
                i += 1;
            }
        }
        i += 1;
        ranges.push(start..i);
    }
    ranges
}

/// Whether this codec reads an item of this kind: messages, reasoning,
/// calls and their outputs, and the built-in tools' items.
fn is_known(kind: &str) -> bool {
    matches!(
        kind,
        "message"
            | "reasoning"
            | "mcp_list_tools"
            | "mcp_approval_request"
            | "mcp_approval_response"
    ) || kind.ends_with("_call")
        || kind.ends_with("_call_output")
}

/// One unit as a chat-completions message.
pub fn engine_message(unit: &[Value]) -> Value {
    if let Some(unknown) = unit.iter().map(kind).find(|k| !is_known(k)) {
        // Its JSON is its text, so that it is counted as sent.
        let text = unit
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        return json!({"role": "developer", "content": text, OPAQUE: unknown});
    }
    let calls: Vec<Value> = unit
        .iter()
        .filter(|item| is_call(item))
        .map(|item| {
            let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
            let name = match field("name") {
                "" => kind(item),
                name => name,
            };
            let arguments = ["arguments", "input", "action"]
                .iter()
                .find_map(|k| item.get(*k))
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .unwrap_or_default();
            tool_call(field("call_id"), name, arguments)
        })
        .collect();
    let text = unit
        .iter()
        .filter(|item| !is_call(item))
        .map(|item| text_of(item.get("content").unwrap_or(item)))
        .collect::<Vec<_>>()
        .join("\n");
    let Some(last) = unit.last() else {
        return json!({"role": "user", "content": ""});
    };
    if !calls.is_empty() {
        return json!({"role": "assistant", "content": text, "tool_calls": calls});
    }
    if is_output(last) {
        let call_id = last.get("call_id").cloned().unwrap_or(Value::Null);
        let output = last.get("output").cloned().unwrap_or(Value::Null);
        let content = output
            .as_str()
            .map_or_else(|| text_of(&output), str::to_string);
        return json!({"role": "tool", "tool_call_id": call_id, "content": content});
    }
    match (kind(last), role(last)) {
        ("message", Some(r)) => {
            let content = last.get("content").cloned().unwrap_or(Value::Null);
            json!({"role": r, "content": content})
        }
        // Built-in tool calls and reasoning: the model's side.
        _ => json!({"role": "assistant", "content": text}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Role, tool_call_id, tool_call_ids};

    /// An item's shape from its text (`None` also when it is not an object).
    fn text_shape(item: &str) -> Option<Shape> {
        raw_shape(&shallow::members(item.as_bytes())?)
    }

    #[test]
    fn units_glue_reasoning_and_parallel_calls() {
        let items = [
            json!({"role": "user", "content": "go"}),
            json!({"type": "reasoning", "id": "rs_1", "summary": []}),
            json!({"type": "function_call", "call_id": "a", "name": "ls", "arguments": "{}"}),
            json!({"type": "function_call", "call_id": "b", "name": "cat", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "a", "output": "x"}),
            json!({"type": "function_call_output", "call_id": "b", "output": "y"}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}),
        ];
        let shapes: Vec<Shape> = items.iter().map(shape).collect();
        assert_eq!(unit_ranges(&shapes), vec![0..1, 1..4, 4..5, 5..6, 6..7]);
        let texts: Vec<String> = items.iter().map(Value::to_string).collect();
        let raw_shapes: Option<Vec<Shape>> = texts.iter().map(|i| text_shape(i)).collect();
        assert_eq!(raw_shapes, Some(shapes));
        let call = engine_message(&items[1..4]);
        assert_eq!(
            tool_call_ids(&call)
                .into_iter()
                .flatten()
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        let out = engine_message(&items[4..5]);
        assert_eq!(Role::of_message(&out), Some(Role::Tool));
        assert_eq!(tool_call_id(&out), Some("a"));
        assert_eq!(engine_message(&items[6..7])["content"][0]["text"], "done");
    }

    #[test]
    fn unknown_items_are_opaque_developer_messages() {
        for item in [
            json!({"type": "additional_tools", "role": "developer", "tools": [{"type": "function", "name": "shell"}]}),
            json!({"type": "configuration_update", "model": "m"}),
            json!({"type": "compaction", "encrypted_content": "gAAA"}),
            json!({"type": "compaction_trigger"}),
            json!({"type": "item_reference", "id": "msg_1"}),
            json!({"foo": 1}),
        ] {
            let m = engine_message(std::slice::from_ref(&item));
            assert_eq!(Role::of_message(&m), Some(Role::Pinned), "{item}");
            assert!(crate::message::is_opaque(&m), "{item}");
            assert_eq!(m["content"], item.to_string());
        }
        let known = json!({"type": "web_search_call", "id": "ws_1", "status": "completed"});
        assert!(!crate::message::is_opaque(&engine_message(&[known])));
    }

    #[test]
    fn the_shape_from_text_is_the_shape_from_the_value() {
        for text in [
            r#"{"type":"function_call","call_id":"a","arguments":"{\"type\":\"reasoning\"}"}"#,
            r#"{"typ\u0065" : "reasoning", "summary": [{"type":"x"}]}"#,
            r#"{"type":null,"role":null}"#,
            r#"{"call_id":7,"type":"function_call"}"#,
            r#"{"call_id":null,"type":"custom_tool_call"}"#,
            r#"{"content":[{"role":"user","type":"reasoning"}]}"#,
            r#" { "role" : "assistant" } "#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(text_shape(text), Some(shape(&value)), "{text}");
        }
        for text in [
            r#"{"type":"reasoning","type":"message"}"#,
            r#"{"type":1}"#,
            "[]",
            "{",
        ] {
            assert_eq!(text_shape(text), None, "{text}");
        }
    }
}
