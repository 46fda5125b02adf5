//! Anthropic Messages (`POST /v1/messages`).
//!
//! - The top-level `system` (a string or text blocks) is the pinned head:
//!   one engine message that stays in its field.
//! - Each message is one engine message. An assistant message's `tool_use`
//!   blocks are its tool calls; a user message that carries `tool_result`
//!   blocks is a tool message answering them, so a cut never falls between
//!   a `tool_use` and its results (the API rejects either half alone).
//! - The summary is appended to `system` as a text block, with a
//!   `cache_control` breakpoint after it when the request uses prompt
//!   caching and fewer than 4 breakpoints remain. Other blocks
//!   (`cache_control` markers, `thinking`) pass through untouched.
//! - What the summarizer reads of an assistant turn: its text, its calls,
//!   and the server tools' blocks as JSON; thinking is the model's own
//!   and folds with its turn. A block of a type this codec does not know
//!   makes the message opaque ([`crate::message::OPAQUE`]): never
//!   summarized, kept as it came.

use crate::api::Fit;
use crate::api::codec::{
    Decoded, RawRequest, RoleErrors, Units, Wire, estimate_fields, model, take_array, text_of,
    tool_call, with_roles,
};
use crate::error::ApiError;
use crate::fold::view::Item;
use crate::message::OPAQUE;
use crate::shallow::Spec;
use serde_json::{Map, Value, json};

/// Most `cache_control` breakpoints a request may carry.
const MAX_BREAKPOINTS: usize = 4;
/// The user message put first when a folded view would start with an
/// assistant message.
pub const CONTINUE_TEXT: &str = "(The earlier conversation is summarized in the system prompt.)";

/// What the fast path reads of a Messages body: the fields the estimate
/// reads, `system` and the messages as text.
pub const SHALLOW: Spec = Spec {
    parsed: &["model", "tools", "max_tokens"],
    raw: &["system"],
    items: "messages",
    held_upstream: &[],
    item_members: false,
};

/// Reads a Messages body shallowly, for the fast path.
pub fn shallow(bytes: &[u8]) -> Option<RawRequest<'_>> {
    RawRequest::one_per_item(bytes, &SHALLOW, Some(("input_schema", "max_tokens")))
}

/// How well a body fits Messages' shape ([`crate::api::Codec::fit`]): a
/// top-level `system`, content blocks only Anthropic has (`tool_use`,
/// `tool_result`, `thinking`, an image with a `source`), or `max_tokens`
/// with `text` blocks and only user and assistant turns are
/// [`Fit::Only`]; `messages` alone is chat completions' as much.
pub fn fit(body: &Map<String, Value>) -> Fit {
    let messages = match body.get("messages") {
        Some(Value::Array(messages)) => messages.as_slice(),
        Some(_) => return Fit::Field,
        None => return Fit::No,
    };
    if body.contains_key("system") {
        return Fit::Only;
    }
    let kind = |b: &Value| b.get("type").and_then(Value::as_str).map(str::to_owned);
    let blocks = || {
        messages
            .iter()
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
    };
    let anthropic_only = blocks().any(|b| {
        matches!(
            kind(b).as_deref(),
            Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking")
        ) || (kind(b).as_deref() == Some("image") && b.get("source").is_some())
    });
    let text_blocks = blocks().any(|b| kind(b).as_deref() == Some("text"));
    let two_roles = messages.iter().all(|m| {
        matches!(
            m.get("role").and_then(Value::as_str),
            Some("user" | "assistant")
        ) && m.get("tool_calls").is_none()
    });
    if anthropic_only || (body.contains_key("max_tokens") && text_blocks && two_roles) {
        Fit::Only
    } else {
        Fit::Field
    }
}

/// Anthropic's words for a `messages` field without a `role` each.
const ROLE_ERRORS: RoleErrors = RoleErrors {
    item: "messages.{i}: must be an object with a string `role`",
    not_array: "messages: must be an array",
    missing: "messages: field required",
};

/// Reads a Messages body.
pub fn decode(mut fields: Map<String, Value>) -> Result<Decoded, ApiError> {
    let model = model(&fields)?;
    // Roles beyond `user` and `assistant` (Claude Code sends `system`
    // reminders between turns) are the API's to judge.
    with_roles(&fields, "messages", &ROLE_ERRORS)?;
    let items = take_array(&mut fields, "messages");
    let mut units = Units::default();
    units.pin("system", fields.get("system"));
    for (i, item) in items.iter().enumerate() {
        units.push(engine_message(item), i..i + 1);
    }
    let estimate = estimate_fields(&fields, model, "input_schema", "max_tokens");
    Ok(units.decoded(fields, items, estimate, None))
}

/// One Anthropic message as a chat-completions message.
pub fn engine_message(message: &Value) -> Value {
    let content = message.get("content").cloned().unwrap_or(Value::Null);
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or_default();
    let of_type = |kind: &'static str| {
        blocks
            .iter()
            .filter(move |b| b.get("type").and_then(Value::as_str) == Some(kind))
    };
    if message.get("role").and_then(Value::as_str) == Some("assistant") {
        let calls: Vec<Value> = of_type("tool_use")
            .map(|b| {
                let id = b.get("id").and_then(Value::as_str).unwrap_or_default();
                let name = b.get("name").and_then(Value::as_str).unwrap_or_default();
                let input = b.get("input").map(Value::to_string).unwrap_or_default();
                tool_call(id, name, input)
            })
            .collect();
        let mut unknown = None;
        let text: Vec<Value> = blocks
            .iter()
            .filter_map(|b| match AssistantBlock::of(b) {
                AssistantBlock::Text => Some(b.clone()),
                AssistantBlock::Server => Some(json!({"type": "text", "text": b.to_string()})),
                AssistantBlock::Own => None,
                AssistantBlock::Unknown(kind) => {
                    unknown.get_or_insert(kind);
                    Some(json!({"type": "text", "text": b.to_string()}))
                }
            })
            .collect();
        let content = if blocks.is_empty() {
            content
        } else {
            Value::Array(text)
        };
        let mut out = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            out["tool_calls"] = Value::Array(calls);
        }
        if let Some(kind) = unknown {
            out[OPAQUE] = Value::String(kind);
        }
        return out;
    }
    let answered =
        of_type("tool_result").find_map(|b| b.get("tool_use_id").and_then(Value::as_str));
    match answered {
        // Results and any text beside them, flattened for counting and
        // summarizing (images stay parts).
        Some(id) => json!({"role": "tool", "tool_call_id": id, "content": flatten(blocks)}),
        None => {
            json!({"role": message.get("role").cloned().unwrap_or(Value::Null), "content": content})
        }
    }
}

/// What the engine message of an assistant turn takes of one block.
enum AssistantBlock {
    /// `text`: as it is.
    Text,
    /// A server tool's call or result (`server_tool_use`,
    /// `web_search_tool_result`, `mcp_tool_use`, …): its JSON, as text.
    Server,
    /// `tool_use` (a call) and the model's thinking: not content.
    Own,
    /// A type this codec does not know (named): its JSON, and the
    /// message is opaque.
    Unknown(String),
}

impl AssistantBlock {
    fn of(block: &Value) -> Self {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => Self::Text,
            Some("tool_use" | "thinking" | "redacted_thinking") => Self::Own,
            Some("server_tool_use" | "mcp_tool_use" | "mcp_tool_result" | "container_upload") => {
                Self::Server
            }
            Some(kind) if kind.ends_with("_tool_result") => Self::Server,
            other => Self::Unknown(other.unwrap_or("").to_string()),
        }
    }
}

/// Blocks with `tool_result` contents lifted to the top level.
fn flatten(blocks: &[Value]) -> Vec<Value> {
    let mut out = Vec::with_capacity(blocks.len());
    for block in blocks {
        match block.get("content") {
            Some(Value::String(s)) => out.push(json!({"type": "text", "text": s})),
            Some(Value::Array(inner)) => out.extend(inner.iter().cloned()),
            _ => out.push(block.clone()),
        }
    }
    out
}

/// Refills `messages` from the view and appends the summary to `system`.
pub fn encode(fields: &mut Map<String, Value>, wire: &Wire, items: Vec<Item>) {
    let mut summary = None;
    let mut messages = wire.render(items, |made| {
        summary = Some(text_of(&made["content"]));
        None
    });
    if let Some(text) = summary {
        if messages
            .first()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            != Some("user")
        {
            messages.insert(0, json!({"role": "user", "content": CONTINUE_TEXT}));
        }
        let mut block = json!({"type": "text", "text": text});
        if let Some(ttl) = summary_breakpoint(fields, &messages) {
            block["cache_control"] = ttl;
        }
        let system = match fields.get_mut("system").map(Value::take) {
            Some(Value::String(s)) if !s.is_empty() => {
                vec![json!({"type": "text", "text": s}), block]
            }
            Some(Value::Array(mut blocks)) => {
                blocks.push(block);
                blocks
            }
            _ => vec![block],
        };
        fields.insert("system".into(), Value::Array(system));
    }
    fields.insert("messages".into(), Value::Array(messages));
}

/// The `cache_control` to put after the summary: only when the request
/// uses prompt caching and a breakpoint is left, with a TTL that keeps
/// the API's order (a 1-hour breakpoint never after a 5-minute one).
fn summary_breakpoint(fields: &Map<String, Value>, messages: &[Value]) -> Option<Value> {
    let mut before = Vec::new();
    for name in ["tools", "system"] {
        if let Some(v) = fields.get(name) {
            breakpoints(v, &mut before);
        }
    }
    let mut after = Vec::new();
    messages.iter().for_each(|m| breakpoints(m, &mut after));
    let automatic = usize::from(fields.get("cache_control").is_some_and(Value::is_object));
    let used = before.len() + after.len() + automatic;
    if used == 0 || used >= MAX_BREAKPOINTS {
        return None;
    }
    if after.iter().any(|long| *long) {
        // Only a 1-hour breakpoint fits here, and only after 1-hour ones.
        return before
            .iter()
            .all(|long| *long)
            .then(|| json!({"type": "ephemeral", "ttl": "1h"}));
    }
    Some(json!({"type": "ephemeral"}))
}

/// Every `cache_control` in `value`, as whether its TTL is one hour.
fn breakpoints(value: &Value, out: &mut Vec<bool>) {
    match value {
        Value::Object(map) => {
            if let Some(cc) = map.get("cache_control").filter(|c| c.is_object()) {
                out.push(cc.get("ttl").and_then(Value::as_str) == Some("1h"));
            }
            map.iter()
                .filter(|(k, _)| *k != "cache_control")
                .for_each(|(_, v)| breakpoints(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| breakpoints(v, out)),
        _ => {}
    }
}

/// The engine message of a unit, one message; one without a string `role`
/// has none (the decoder refuses it, so the fast path must not take it).
pub fn unit_message(unit: &[Value]) -> Value {
    unit.first()
        .filter(|m| m.get("role").is_some_and(Value::is_string))
        .map_or(Value::Null, engine_message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Role, tool_call_id, tool_call_ids};

    #[test]
    fn tool_use_and_results_pair_by_id() {
        let call = json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "running"},
            {"type": "tool_use", "id": "tu_1", "name": "bash", "input": {"cmd": "ls"}}]});
        let result = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": [{"type": "text", "text": "a.txt"}]}]});
        let c = engine_message(&call);
        assert_eq!(
            tool_call_ids(&c).into_iter().flatten().collect::<Vec<_>>(),
            ["tu_1"]
        );
        assert_eq!(
            c["tool_calls"][0]["function"]["arguments"],
            r#"{"cmd":"ls"}"#
        );
        let r = engine_message(&result);
        assert_eq!(Role::of_message(&r), Some(Role::Tool));
        assert_eq!(tool_call_id(&r), Some("tu_1"));
        assert_eq!(text_of(&r["content"]), "a.txt");
        let user = engine_message(&json!({"role": "user", "content": "hi"}));
        assert_eq!(user, json!({"role": "user", "content": "hi"}));
    }

    #[test]
    fn breakpoint_only_when_caching_and_room() {
        let m = |cc: Value| json!({"role": "user", "content": [{"type": "text", "text": "x", "cache_control": cc}]});
        let fields = Map::new();
        assert_eq!(
            summary_breakpoint(&fields, &[json!({"role": "user", "content": "x"})]),
            None
        );
        let five = json!({"type": "ephemeral"});
        let hour = json!({"type": "ephemeral", "ttl": "1h"});
        assert_eq!(
            summary_breakpoint(&fields, &[m(five.clone())]),
            Some(five.clone())
        );
        assert_eq!(
            summary_breakpoint(&fields, &[m(hour.clone())]),
            Some(hour.clone())
        );
        let full = vec![
            m(five.clone()),
            m(five.clone()),
            m(five.clone()),
            m(five.clone()),
        ];
        assert_eq!(summary_breakpoint(&fields, &full), None);
        let mut tools5 = Map::new();
        tools5.insert(
            "tools".into(),
            json!([{"name": "t", "cache_control": five}]),
        );
        assert_eq!(summary_breakpoint(&tools5, &[m(hour)]), None);
    }
}
