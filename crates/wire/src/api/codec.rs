//! What the APIs' codecs share: the decoded body ([`Decoded`]), the wire
//! items behind the engine's messages ([`Wire`]), and the helpers each
//! codec builds them with. Each API maps its request body to the fold
//! engine's messages (chat-completions messages, one per unit a cut may
//! not split) and a view of those messages back to its own body.

use crate::error::ApiError;
use crate::fold::view::Item;
use crate::message::{MessageId, unit_id};
use serde_json::{Map, Value, json};
use std::ops::Range;

/// A request body's top-level fields.
pub type Fields = Map<String, Value>;

/// A request read shallowly, without building a `Value` tree
/// ([`crate::shallow`]): its pinned fields and conversation items stay
/// JSON text, other fields are skipped unless the estimate needs them.
/// The pipeline's fast path decides from it alone.
pub struct RawRequest<'a> {
    /// The `model` field (empty: the API names the model in the path, and
    /// the route's model is taken, [`super::Route::model`]).
    pub model: String,
    /// The top-level fields the estimate reads, in chat-completions names
    /// (model, tool definitions, response format, output limits).
    pub rest: Map<String, Value>,
    /// The pinned top-level fields (`system`, `instructions`), as the
    /// client wrote them: delimited, read (and their UTF-8 checked) by
    /// [`raw_pinned`].
    pub pinned: Vec<(&'static str, &'a [u8])>,
    /// The conversation's items, as the client wrote them: delimited,
    /// read (and their UTF-8 checked) by [`raw_unit`].
    pub items: Vec<&'a [u8]>,
    /// The items of each engine message, in order (as the decoder groups
    /// them).
    pub units: Vec<Range<usize>>,
    /// Why the request must go upstream untouched, when it must.
    pub opaque: Option<&'static str>,
}

impl<'a> RawRequest<'a> {
    /// A request whose items are one engine message each, read by
    /// `spec`; `schema` and `max` name its tools' schema and output limit
    /// (`None`: the fields are chat completions' already).
    pub fn one_per_item(
        bytes: &'a [u8],
        spec: &crate::shallow::Spec,
        names: Option<(&str, &str)>,
    ) -> Option<Self> {
        Self::from_fields(crate::shallow::read(bytes, spec)?, spec, names)
    }

    /// [`Self::one_per_item`] of fields already read by `spec`.
    pub fn from_fields(
        fields: crate::shallow::Fields<'a>,
        spec: &crate::shallow::Spec,
        names: Option<(&str, &str)>,
    ) -> Option<Self> {
        let model = match fields.parsed.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            _ => return None,
        };
        let held = spec
            .held_upstream
            .iter()
            .any(|k| fields.parsed.get(*k).is_some_and(|v| !v.is_null()));
        let rest = match names {
            Some((schema, max)) => estimate_fields(&fields.parsed, model.clone(), schema, max),
            None => fields.parsed,
        };
        // A field without text makes no message (as the decoder reads it).
        let mut pinned = fields.raw;
        pinned.retain(|(_, field)| !matches!(*field, b"null" | b"\"\"" | b"[]"));
        Some(Self {
            model,
            rest,
            pinned,
            units: (0..fields.items.len()).map(|i| i..i + 1).collect(),
            items: fields.items,
            opaque: held.then_some(crate::shallow::HELD_UPSTREAM),
        })
    }
}

impl RawRequest<'_> {
    /// Reads each unit's items in order into `out` with `read`, which is
    /// told whether the unit before makes tool calls (on an API that
    /// [answers by position](super::spec::ApiSpec::answers_by_position); else
    /// always `false`) and tells whether this one does. `None` when a
    /// unit cannot be read.
    pub fn read_units<T>(
        &self,
        api: super::Api,
        out: &mut Vec<T>,
        mut read: impl FnMut(&[&[u8]], bool) -> Option<(T, bool)>,
    ) -> Option<()> {
        let positional = api.answers_by_position();
        let mut after_calls = false;
        for range in &self.units {
            let (unit, calls) = read(self.items.get(range.clone())?, after_calls)?;
            after_calls = positional && calls;
            out.push(unit);
        }
        Some(())
    }
}

/// [`pinned_unit`] of a pinned field given as JSON text (`None` also when
/// the text is not JSON the decoder reads, or not UTF-8).
pub fn raw_pinned(name: &str, field: &[u8]) -> Option<(Value, MessageId)> {
    pinned_unit(name, &serde_json::from_slice(field).ok()?)
}

/// The engine message the wire items of `api` given as JSON text stand
/// for, and its identity, as the decoder makes them (`None`: an item is
/// not JSON the decoder reads, or not UTF-8); `after_calls`: the unit
/// before them makes tool calls ([`super::Codec::unit_message`]).
pub fn raw_unit(api: super::Api, items: &[&[u8]], after_calls: bool) -> Option<(Value, MessageId)> {
    let values = items
        .iter()
        .map(|i| serde_json::from_slice(i))
        .collect::<Result<Vec<Value>, _>>()
        .ok()?;
    Some((api.unit_message(&values, after_calls), unit_id(&values)))
}

/// The view of `messages`, the engine's, laid out by the fold engine as
/// `items` in the conversation `field`: the fill of every body whose
/// messages are the engine's (chat completions').
pub fn fill_messages(
    fields: &mut Map<String, Value>,
    field: &str,
    messages: &[Value],
    items: Vec<Item>,
) {
    let view = crate::fold::view::materialize(messages, items);
    fields.insert(field.into(), Value::Array(view));
}

/// The engine message of pinned field `name` and its identity, as the
/// decoder makes them (`None`: the field has no text, and no message).
pub fn pinned_unit(name: &str, field: &Value) -> Option<(Value, MessageId)> {
    let text = text_of(field);
    (!text.is_empty()).then(|| {
        let id = unit_id([&json!(name), field]);
        (json!({"role": "system", "content": text}), id)
    })
}

/// A request body as the pipeline reads it, for an estimate.
#[derive(Debug)]
pub struct ReadBody {
    /// The conversation as the fold engine reads it (chat-completions
    /// messages, one per unit a cut may not split).
    pub messages: Vec<Value>,
    /// The top-level fields the estimate reads, in chat-completions names.
    pub fields: Map<String, Value>,
    /// Why the proxy forwards the request untouched, when it does.
    pub untouched: Option<&'static str>,
}

impl ReadBody {
    /// Reads a body of `api` as the pipeline reads it, for an estimate
    /// made outside the proxy (`foldgate estimate`).
    pub fn read(api: super::Api, bytes: &[u8]) -> Result<Self, ApiError> {
        api.decode(None, bytes).map(Self::of)
    }

    /// [`ReadBody::read`] of a body posted to `path` (an API may name the
    /// model there).
    pub fn read_at(api: super::Api, path: &str, bytes: &[u8]) -> Result<Self, ApiError> {
        api.decode(Some(path), bytes).map(Self::of)
    }

    fn of(decoded: Decoded) -> Self {
        let fields = decoded.estimate_fields().clone();
        Self {
            messages: decoded.messages,
            fields,
            untouched: decoded.opaque,
        }
    }
}

/// A request body read for the fold engine.
pub struct Decoded {
    /// The body's fields; the conversation field is left in place as a
    /// `null` the view refills, so the field order is kept.
    pub fields: Map<String, Value>,
    /// The conversation as the fold engine reads it: chat-completions
    /// messages, one per unit.
    pub messages: Vec<Value>,
    /// Each pinned field's identity, in order, made as it was read; `None`
    /// for chat completions, whose messages are their own items. The
    /// other engine messages' identities are their wire items' hashes,
    /// made only when asked ([`Decoded::ids`]): a request the fast path
    /// read has them already, so its items are not encoded and hashed
    /// again on every full-path request.
    pub pinned_ids: Option<Vec<MessageId>>,
    /// The original items behind the engine's messages (`None`: chat
    /// completions, whose messages are the items).
    pub wire: Option<Wire>,
    /// The top-level fields the estimate reads, in chat-completions names
    /// (`model`, `tools`, `max_tokens`, …), when `fields` has others.
    pub estimate_fields: Option<Map<String, Value>>,
    /// Why the request must go upstream untouched, when it must: its
    /// history is held upstream, or it has no history to fold.
    pub opaque: Option<&'static str>,
}

impl Decoded {
    /// The top-level fields the estimate and the budget read.
    pub fn estimate_fields(&self) -> &Map<String, Value> {
        self.estimate_fields.as_ref().unwrap_or(&self.fields)
    }

    /// Each engine message's identity, stable across turns: the hash of
    /// the wire items it stands for ([`unit_id`]), a pinned field's as
    /// read, a chat message's its own ([`crate::message::message_id`]).
    pub fn ids(&self) -> Vec<MessageId> {
        let (Some(wire), Some(pinned)) = (&self.wire, &self.pinned_ids) else {
            return crate::message::ids_of(&self.messages);
        };
        let mut pinned = pinned.iter();
        wire.units
            .iter()
            .map(|unit| match unit {
                Some(range) => unit_id(&wire.items[range.clone()]),
                None => pinned.next().copied().unwrap_or_default(),
            })
            .collect()
    }
}

/// The items of a non-chat body and which of them each engine message
/// stands for.
#[derive(Debug, Default)]
pub struct Wire {
    /// The conversation's items, as the client sent them.
    pub items: Vec<Value>,
    /// `units[i]`: the items of engine message `i`; `None` for a pinned
    /// top-level field (`system`, `instructions`) that stays where it is.
    pub units: Vec<Option<Range<usize>>>,
}

impl Wire {
    /// The items of a view, in order; `made` turns each of foldgate's own
    /// messages into an item in place, or takes it elsewhere (`None`).
    pub(super) fn render(
        &self,
        items: Vec<Item>,
        mut made: impl FnMut(Value) -> Option<Value>,
    ) -> Vec<Value> {
        let mut out = Vec::with_capacity(self.items.len() + 2);
        for item in items {
            match item {
                Item::Original(i) => {
                    if let Some(Some(range)) = self.units.get(i) {
                        out.extend(self.items[range.clone()].iter().cloned());
                    }
                }
                Item::New(message) => out.extend(made(message)),
                Item::Stub(i, stub) => {
                    if let Some(Some(range)) = self.units.get(i) {
                        out.extend(stubbed(&self.items[range.clone()], &stub));
                    }
                }
            }
        }
        out
    }
}

/// The items of a compressed tool-result unit: each result keeps its item
/// and its pairing (`tool_use_id`, `call_id`) and every other field; the
/// first result's content becomes the stub's text, the others' a pointer
/// to it (the stub's specifics and the archive cover all of them).
pub(super) fn stubbed(items: &[Value], stub: &Value) -> Vec<Value> {
    let text = stub.get("content").and_then(Value::as_str).unwrap_or("");
    let mut first = true;
    let mut next = || {
        let t = if first { text } else { STUB_SIBLING };
        first = false;
        Value::String(t.to_string())
    };
    items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            let is_output = item
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("_call_output"));
            if is_output {
                item["output"] = next();
            } else if let Some(Value::Array(blocks)) = item.get_mut("content") {
                for block in blocks {
                    if block.get("type").and_then(Value::as_str) == Some("tool_result") {
                        block["content"] = next();
                    }
                }
            }
            item
        })
        .collect()
}

/// The content of a compressed unit's second and later tool results.
const STUB_SIBLING: &str = "[foldgate: compressed with the tool result before it]";

/// The body as a JSON object.
pub(super) fn object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(bad("request body must be a JSON object", None)),
        Err(e) => Err(bad(&format!("request body is not valid JSON: {e}"), None)),
    }
}

/// The request's `model`, which must be a non-empty string.
pub(super) fn model(fields: &Map<String, Value>) -> Result<String, ApiError> {
    match fields.get("model") {
        Some(Value::String(m)) if !m.is_empty() => Ok(m.clone()),
        Some(_) => Err(bad("`model` must be a non-empty string", Some("model"))),
        None => Err(bad("you must provide a `model` parameter", Some("model"))),
    }
}

/// How an API words a conversation field that is not a list of items
/// with a string `role`, in its own servers' words ([`with_roles`]).
pub(super) struct RoleErrors {
    /// An item without a string `role`; `{i}` is its index.
    pub item: &'static str,
    /// The field is not an array.
    pub not_array: &'static str,
    /// The field is missing.
    pub missing: &'static str,
}

/// Checks that `fields[field]` is an array of items with a string `role`.
pub(super) fn with_roles(
    fields: &Map<String, Value>,
    field: &'static str,
    errors: &RoleErrors,
) -> Result<(), ApiError> {
    let no_role = |m: &Value| !m.get("role").is_some_and(Value::is_string);
    match fields.get(field) {
        Some(Value::Array(items)) => match items.iter().position(no_role) {
            Some(i) => Err(bad(
                &errors.item.replace("{i}", &i.to_string()),
                Some(field),
            )),
            None => Ok(()),
        },
        Some(_) => Err(bad(errors.not_array, Some(field))),
        None => Err(bad(errors.missing, Some(field))),
    }
}

/// The client's 400, with the parameter it names.
pub(super) fn bad(message: &str, param: Option<&'static str>) -> ApiError {
    ApiError::BadRequest {
        message: message.to_string(),
        param,
    }
}

/// Takes an array field's items, leaving `null` in its place.
pub(super) fn take_array(fields: &mut Map<String, Value>, name: &str) -> Vec<Value> {
    match fields.get_mut(name).map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    }
}

/// The text of a content field: a string, or the `text` of its parts
/// (nested `content` arrays included), one per line.
pub(super) fn text_of(content: &Value) -> String {
    let mut out = String::new();
    collect_text(content, &mut out);
    out
}

fn collect_text(content: &Value, out: &mut String) {
    match content {
        Value::String(s) => push_line(out, s),
        Value::Array(parts) => parts.iter().for_each(|p| collect_text(p, out)),
        Value::Object(part) => {
            for key in ["text", "thinking", "output"] {
                if let Some(Value::String(s)) = part.get(key) {
                    push_line(out, s);
                }
            }
            for key in ["content", "summary"] {
                if let Some(inner) = part.get(key) {
                    collect_text(inner, out);
                }
            }
        }
        _ => {}
    }
}

fn push_line(out: &mut String, s: &str) {
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(s);
}

/// A chat-completions tool call for the engine (pairing and the ledger
/// read its id, name and arguments).
pub(super) fn tool_call(id: &str, name: &str, arguments: String) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// The fields the estimate reads, in chat-completions names: `model`,
/// function `tools` (named, with their schema under `schema`) and the
/// output limit found under `max`.
pub(super) fn estimate_fields(
    fields: &Map<String, Value>,
    model: String,
    schema: &str,
    max: &str,
) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("model".into(), Value::String(model));
    if let Some(Value::Array(tools)) = fields.get("tools") {
        let tools = tools
            .iter()
            .filter_map(|t| {
                let function = json!({
                    "name": t.get("name")?,
                    "description": t.get("description").cloned().unwrap_or(Value::Null),
                    "parameters": t.get(schema).cloned().unwrap_or(Value::Null),
                });
                Some(json!({"type": "function", "function": function}))
            })
            .collect();
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(limit) = fields.get(max) {
        out.insert("max_tokens".into(), limit.clone());
    }
    out
}

/// The engine's messages of a non-chat body as they are built: each with
/// its identity and the items it stands for.
#[derive(Default)]
pub(super) struct Units {
    messages: Vec<Value>,
    /// The pinned fields' identities.
    pinned: Vec<MessageId>,
    ranges: Vec<Option<Range<usize>>>,
}

impl Units {
    /// A pinned top-level field (`system`, `instructions`), when it has text.
    pub(super) fn pin(&mut self, name: &str, field: Option<&Value>) {
        if let Some((message, id)) = field.and_then(|f| pinned_unit(name, f)) {
            self.messages.push(message);
            self.pinned.push(id);
            self.ranges.push(None);
        }
    }

    /// The engine message for `items[range]` (its identity is made only
    /// when asked, [`Decoded::ids`]).
    pub(super) fn push(&mut self, message: Value, range: Range<usize>) {
        self.messages.push(message);
        self.ranges.push(Some(range));
    }

    /// The decoded body.
    pub(super) fn decoded(
        self,
        fields: Map<String, Value>,
        items: Vec<Value>,
        estimate_fields: Map<String, Value>,
        opaque: Option<&'static str>,
    ) -> Decoded {
        Decoded {
            fields,
            messages: self.messages,
            pinned_ids: Some(self.pinned),
            wire: Some(Wire {
                items,
                units: self.ranges,
            }),
            estimate_fields: Some(estimate_fields),
            opaque,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_of_parts() {
        let c = json!([{"type": "text", "text": "a"}, {"type": "tool_result", "content": [{"type": "text", "text": "b"}]}]);
        assert_eq!(text_of(&c), "a\nb");
        assert_eq!(text_of(&json!("x")), "x");
    }
}
