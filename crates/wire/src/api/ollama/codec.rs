//! Ollama's chat body: each message is one engine message (its text as a
//! chat-completions message, its calls with their arguments as JSON
//! text), while the view is laid out from the messages as the client sent
//! them: `images`, `thinking`, `tool_name` and the calls' argument objects
//! go back untouched. The fields around `messages` (`format`, `options`,
//! `keep_alive`, `think`, `tools`) are never changed. A message with a
//! member this codec does not read is opaque ([`crate::message::OPAQUE`]):
//! never summarized, kept as it came.

use super::{Ollama, SPEC};
use crate::api::codec::{
    Decoded, Fields, RawRequest, Units, Wire, model, take_array, text_of, tool_call,
};
use crate::api::{ApiSpec, Codec, Fit};
use crate::error::ApiError;
use crate::fold::view::Item;
use crate::message::OPAQUE;
use crate::shallow::{self, Spec};
use crate::tokens::REQUEST_WINDOW;
use serde_json::{Map, Value, json};

/// The prefix of the ids foldgate gives calls that came without one
/// (Ollama's calls often do).
pub const MADE_ID: &str = "ollama-call-";

impl Codec for Ollama {
    fn spec(&self) -> &'static ApiSpec {
        &SPEC
    }

    /// Reads an Ollama chat body for the fold engine: checked as a chat
    /// body is (a string `model`, `messages` of objects with a string `role`).
    fn decode(&self, _path: Option<&str>, bytes: &[u8]) -> Result<Decoded, ApiError> {
        let mut fields = crate::api::chat::codec::parse(bytes)?;
        let model = model(&fields)?;
        let estimate = estimate_fields(&fields, model);
        let items = take_array(&mut fields, "messages");
        let mut units = Units::default();
        for (i, item) in items.iter().enumerate() {
            units.push(engine_message(item, i), i..i + 1);
        }
        Ok(units.decoded(fields, items, estimate, None))
    }

    /// Reads an Ollama chat body shallowly, for the fast path (`None`: the
    /// decoder judges it). Each message is one unit ([`unit_message`]).
    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        let fields = shallow::read(bytes, &SHALLOW)?;
        let model = match fields.parsed.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            _ => return None,
        };
        Some(RawRequest {
            rest: estimate_fields(&fields.parsed, model.clone()),
            model,
            pinned: Vec::new(),
            units: (0..fields.items.len()).map(|i| i..i + 1).collect(),
            items: fields.items,
            opaque: None,
        })
    }

    /// The engine message of a message read alone by the fast path, as the
    /// decoder makes it; `Null` (the body goes to the decoder) for one the
    /// decoder refuses (no string `role`) and for one with a call that has no
    /// id: the id made for it names the message's position, which a message
    /// read alone does not know.
    fn unit_message(&self, unit: &[Value], _after_calls: bool) -> Value {
        let Some(item) = unit.first() else {
            return Value::Null;
        };
        let unnamed_call = item
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|calls| {
                calls
                    .iter()
                    .any(|call| call_id(call, "").starts_with(MADE_ID))
            });
        if !item.get("role").is_some_and(Value::is_string) || unnamed_call {
            return Value::Null;
        }
        engine_message(item, 0)
    }

    /// `fields` with the view laid out: the client's messages as they came,
    /// foldgate's own (the summary) as plain Ollama messages, and a
    /// compressed message as its original with the stub's text.
    fn fill_wire(&self, fields: &mut Fields, _: &[Value], wire: &Wire, items: Vec<Item>) {
        let original = |i: usize| {
            wire.units
                .get(i)
                .and_then(Option::as_ref)
                .map_or(&[][..], |range| &wire.items[range.clone()])
        };
        let mut out = Vec::with_capacity(wire.items.len() + 2);
        for item in items {
            match item {
                Item::Original(i) => out.extend(original(i).iter().cloned()),
                Item::New(message) => out.push(own_message(&message)),
                Item::Stub(i, stub) => {
                    let text = stub.get("content").map(text_of).unwrap_or_default();
                    out.extend(original(i).iter().map(|m| {
                        let mut m = m.clone();
                        m["content"] = Value::String(text.clone());
                        m
                    }));
                }
            }
        }
        fields.insert("messages".into(), Value::Array(out));
    }

    /// Only Ollama's clients write `options`, `keep_alive` or `think`.
    fn fit(&self, body: &Map<String, Value>) -> Fit {
        match ["options", "keep_alive", "think"]
            .iter()
            .any(|k| body.contains_key(*k))
        {
            true if body.contains_key("messages") => Fit::Only,
            _ if body.contains_key("messages") => Fit::Field,
            _ => Fit::No,
        }
    }
}

/// What the fast path reads of a chat body: the fields the estimate reads
/// ([`estimate_fields`]) and the messages as text.
const SHALLOW: Spec = Spec {
    parsed: &["model", "tools", "options", "format"],
    raw: &[],
    items: "messages",
    held_upstream: &[],
    item_members: false,
};

/// The engine message of the client's message at `index`: its role, its
/// text, its calls (ids made where it has none) and the call a tool
/// result answers, when it says.
pub fn engine_message(item: &Value, index: usize) -> Value {
    let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
    let content = item.get("content").map(text_of).unwrap_or_default();
    let mut message = json!({"role": role, "content": content});
    let calls = item.get("tool_calls").and_then(Value::as_array);
    if let Some(calls) = calls.filter(|c| !c.is_empty()) {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(k, call)| {
                let id = call_id(call, &format!("{index}-{k}"));
                let name = call
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                tool_call(&id, name, arguments_text(call))
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    for key in ["tool_call_id", "tool_name"] {
        if let Some(value) = item.get(key).filter(|v| v.is_string()) {
            let name = if key == "tool_name" { "name" } else { key };
            message[name] = value.clone();
        }
    }
    let unknown = item
        .as_object()
        .and_then(|fields| fields.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())));
    if let Some(name) = unknown {
        message[OPAQUE] = Value::String(name.clone());
    }
    message
}

/// The members of a message this codec reads.
const KNOWN_FIELDS: [&str; 8] = [
    "role",
    "content",
    "images",
    "thinking",
    "tool_calls",
    "tool_name",
    "tool_call_id",
    "name",
];

/// A call's id, or one made from `made` when it has none.
pub fn call_id(call: &Value, made: &str) -> String {
    match call.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!("{MADE_ID}{made}"),
    }
}

/// A call's arguments (an object in Ollama) as JSON text.
pub fn arguments_text(call: &Value) -> String {
    match call.pointer("/function/arguments") {
        Some(Value::String(text)) => text.clone(),
        Some(args) => args.to_string(),
        None => "{}".into(),
    }
}

/// The fields the estimate reads, in chat-completions names: the model,
/// the tools (Ollama's are chat completions' shape), `options.num_predict`
/// as the output limit, a JSON schema `format` as a schema response
/// format, and `options.num_ctx` as the request's own window.
fn estimate_fields(fields: &Map<String, Value>, model: String) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("model".into(), Value::String(model));
    if let Some(tools) = fields.get("tools").filter(|t| t.is_array()) {
        out.insert("tools".into(), tools.clone());
    }
    let option = |name: &str| {
        fields
            .get("options")
            .and_then(|o| o.get(name))
            .and_then(Value::as_u64)
            .filter(|&n| n > 0)
    };
    if let Some(limit) = option("num_predict") {
        out.insert("max_tokens".into(), limit.into());
    }
    if let Some(window) = option("num_ctx") {
        out.insert(REQUEST_WINDOW.into(), window.into());
    }
    if let Some(schema) = fields.get("format").filter(|f| f.is_object()) {
        let format = json!({"type": "json_schema", "json_schema": {"schema": schema}});
        out.insert("response_format".into(), format);
    }
    out
}

/// One of foldgate's own messages (chat-completions shaped) as an Ollama
/// message: its role and its text.
fn own_message(message: &Value) -> Value {
    let role = message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("user");
    let content = message.get("content").map(text_of).unwrap_or_default();
    json!({"role": role, "content": content})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_the_engines_and_fields_stay() {
        let body = json!({
            "model": "llama3.2",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "look", "images": ["aGk="]},
                {"role": "assistant", "content": "", "thinking": "hm",
                 "tool_calls": [{"function": {"name": "ls", "arguments": {"p": "/"}}}]},
                {"role": "tool", "content": "a b", "tool_name": "ls"},
            ],
            "options": {"num_ctx": 8192, "num_predict": 64},
            "format": "json", "keep_alive": "5m", "think": true,
        });
        let decoded = Ollama.decode(None, body.to_string().as_bytes()).unwrap();
        let m = &decoded.messages;
        assert_eq!(m.len(), 4);
        assert_eq!(m[1], json!({"role": "user", "content": "look"}));
        let call = &m[2]["tool_calls"][0];
        assert_eq!(call["id"], "ollama-call-2-0");
        assert_eq!(call["function"]["arguments"], "{\"p\":\"/\"}");
        assert_eq!(m[3]["name"], "ls");
        let estimate = decoded.estimate_fields();
        assert_eq!(estimate[REQUEST_WINDOW], 8192);
        assert_eq!(estimate["max_tokens"], 64);
        let mut fields = decoded.fields;
        let wire = decoded.wire.unwrap();
        Ollama.fill_wire(
            &mut fields,
            &[],
            &wire,
            (0..4).map(Item::Original).collect(),
        );
        assert_eq!(
            Value::Object(fields),
            body,
            "a view of everything is the body"
        );
    }

    #[test]
    fn stubs_and_own_messages_take_ollamas_shape() {
        let body = json!({"model": "m", "messages": [
            {"role": "user", "content": "go"},
            {"role": "tool", "content": "long output", "tool_name": "ls"}]});
        let decoded = Ollama.decode(None, body.to_string().as_bytes()).unwrap();
        let mut fields = decoded.fields;
        let summary = json!({"role": "system", "content": [{"type": "text", "text": "S"}]});
        let stub = json!({"role": "tool", "content": "[stub]"});
        let items = vec![Item::New(summary), Item::Original(0), Item::Stub(1, stub)];
        Ollama.fill_wire(&mut fields, &[], &decoded.wire.unwrap(), items);
        assert_eq!(
            fields["messages"],
            json!([{"role": "system", "content": "S"}, {"role": "user", "content": "go"},
                   {"role": "tool", "content": "[stub]", "tool_name": "ls"}])
        );
        assert!(
            Ollama
                .decode(None, br#"{"model":"m","messages":[{"content":"x"}]}"#)
                .is_err()
        );
        assert!(Ollama.decode(None, br#"{"messages":[]}"#).is_err());
    }
}
