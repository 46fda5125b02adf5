//! Gemini `generateContent` bodies.
//!
//! - `systemInstruction` (or `system_instruction`) is the pinned head: one
//!   engine message that stays in its field.
//! - Each of `contents` is one engine message (`user` → user, `model` →
//!   assistant). A model turn's `functionCall` parts are its tool calls;
//!   a user turn carrying `functionResponse` parts is a tool message
//!   answering them, so a cut never falls between a call and its
//!   response (the API rejects either half alone). Gemini ties them by
//!   order, not always by id: the engine's ids are made from the model
//!   turn's position, stable across turns.
//! - The summary is appended to `systemInstruction` as a text part. Other
//!   parts (`inlineData`, `fileData`, `thought`, signatures) pass through.
//! - The summarizer reads text, function responses and code parts
//!   (`executableCode`, `codeExecutionResult`) as text. A part of a kind
//!   this codec does not know makes its content opaque
//!   ([`crate::message::OPAQUE`]): never summarized, kept as it came.
//! - The model is in the path (`/v1beta/models/{model}:generateContent`).

use crate::api::codec::{Decoded, Units, Wire, bad, text_of, tool_call};
use crate::error::ApiError;
use crate::fold::view::Item;
use crate::message::{OPAQUE, makes_calls};
use serde_json::{Map, Value, json};

/// The user turn put first when a folded view would start with a model
/// turn.
pub const CONTINUE_TEXT: &str =
    "(The earlier conversation is summarized in the system instruction.)";

/// The two spellings the API takes for the system instruction.
pub(super) const SYSTEM_FIELDS: [&str; 2] = ["systemInstruction", "system_instruction"];

/// The model a path names: `…/models/{model}:generateContent`.
pub fn model_in_path(path: &str) -> Option<&str> {
    // Searched by windows: a substring searcher's set-up costs more than
    // this short scan (the path is read a few times per request).
    const MARK: &[u8] = b"/models/";
    let at = path
        .as_bytes()
        .windows(MARK.len())
        .rposition(|w| w == MARK)?;
    let rest = path.get(at + MARK.len()..)?;
    let model = rest.split(':').next()?;
    (!model.is_empty()).then_some(model)
}

/// Reads a `generateContent` body for `model`.
pub fn decode(mut fields: Map<String, Value>, model: &str) -> Result<Decoded, ApiError> {
    match fields.get("contents") {
        Some(Value::Array(cs)) => {
            if let Some(i) = cs.iter().position(|c| !c.is_object()) {
                return Err(bad(
                    &format!("contents[{i}]: must be an object"),
                    Some("contents"),
                ));
            }
        }
        Some(_) => return Err(bad("contents: must be an array", Some("contents"))),
        None => return Err(bad("contents: field required", Some("contents"))),
    }
    let items = match fields.get_mut("contents").map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    let mut units = Units::default();
    if let Some(name) = system_field(&fields) {
        units.pin(name, fields.get(name).and_then(|s| s.get("parts")));
    }
    // Whether the content before makes calls (the engine message says).
    let mut after_calls = false;
    for (i, item) in items.iter().enumerate() {
        let message = engine_message(i, item, i.checked_sub(1).filter(|_| after_calls));
        after_calls = makes_calls(&message);
        units.push(message, i..i + 1);
    }
    let estimate = estimate_fields(&fields, Some(model));
    Ok(units.decoded(fields, items, estimate, None))
}

/// The name the body's system instruction goes by, if it has one.
pub(super) fn system_field(fields: &Map<String, Value>) -> Option<&'static str> {
    SYSTEM_FIELDS.into_iter().find(|f| fields.contains_key(*f))
}

/// A content's parts.
fn parts(content: &Value) -> &[Value] {
    content
        .get("parts")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The engine's id of the `k`th call in the model turn at `index`.
fn call_id(index: usize, k: usize) -> String {
    format!("gemini-{index}-{k}")
}

/// The engine message of a content read by the fast path, which follows
/// a content making calls (`after_calls`): [`engine_message`], its call
/// ids made as if it stood first (positional ids are neither counted nor
/// part of a message's identity).
pub(super) fn unit_message(content: &Value, after_calls: bool) -> Value {
    engine_message(0, content, after_calls.then_some(0))
}

/// Content `index` as a chat-completions message; `answers`: the index
/// of the content before it when that one makes calls, which a function
/// response answers.
fn engine_message(index: usize, content: &Value, answers: Option<usize>) -> Value {
    let parts = parts(content);
    let is_model = content.get("role").and_then(Value::as_str) == Some("model");
    let calls: Vec<&Value> = parts.iter().filter_map(|p| p.get("functionCall")).collect();
    if is_model {
        let tool_calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(k, call)| {
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                let args = call.get("args").map(Value::to_string).unwrap_or_default();
                tool_call(&call_id(index, k), name, args)
            })
            .collect();
        let mut out = json!({"role": "assistant", "content": engine_parts(parts)});
        if !tool_calls.is_empty() {
            out["tool_calls"] = Value::Array(tool_calls);
        }
        return opaque_if_unknown(out, parts);
    }
    let responds = parts.iter().any(|p| p.get("functionResponse").is_some());
    let out = match answers {
        Some(at) if responds => json!({
            "role": "tool",
            "tool_call_id": call_id(at, 0),
            "content": engine_parts(parts),
        }),
        _ => json!({"role": "user", "content": engine_parts(parts)}),
    };
    opaque_if_unknown(out, parts)
}

/// The members of a part this codec reads (a part is one of them, with
/// a signature or a `thought` flag beside it).
const KNOWN_PART_FIELDS: [&str; 9] = [
    "text",
    "functionCall",
    "functionResponse",
    "inlineData",
    "fileData",
    "executableCode",
    "codeExecutionResult",
    "thought",
    "thoughtSignature",
];

/// `message`, marked opaque when a part is of a kind this codec does not
/// read (a part with none of [`KNOWN_PART_FIELDS`]).
fn opaque_if_unknown(mut message: Value, parts: &[Value]) -> Value {
    let unknown = parts.iter().find_map(|p| match p {
        Value::Object(part) if part.keys().any(|k| KNOWN_PART_FIELDS.contains(&k.as_str())) => None,
        Value::Object(part) => Some(part.keys().next().cloned().unwrap_or_default()),
        _ => Some(String::new()),
    });
    if let Some(kind) = unknown {
        message[OPAQUE] = Value::String(kind);
    }
    message
}

/// Parts as chat-completions content parts: text as text, a function
/// response as the text of its result (for counting and summarizing),
/// inline or linked media as the part type the estimate prices (image,
/// audio, file), anything else as it is.
fn engine_parts(parts: &[Value]) -> Value {
    let out: Vec<Value> = parts
        .iter()
        .filter(|p| p.get("functionCall").is_none())
        .map(|p| {
            if let Some(text) = p.get("text").and_then(Value::as_str) {
                json!({"type": "text", "text": text})
            } else if let Some(r) = p.get("functionResponse") {
                let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
                let result = r.get("response").map(Value::to_string).unwrap_or_default();
                json!({"type": "text", "text": format!("{name}: {result}")})
            } else if let Some(code) = p
                .get("executableCode")
                .or_else(|| p.get("codeExecutionResult"))
            {
                let text = ["code", "output"]
                    .iter()
                    .find_map(|k| code.get(*k).and_then(Value::as_str))
                    .unwrap_or_default();
                json!({"type": "text", "text": text})
            } else if let Some(media) = p.get("inlineData").or_else(|| p.get("fileData")) {
                let mime = media.get("mimeType").and_then(Value::as_str).unwrap_or("");
                let kind = match mime.split('/').next() {
                    Some("image") => "image",
                    Some("audio") => "input_audio",
                    _ => "file",
                };
                json!({"type": kind})
            } else {
                // A signature alone is the model's own; anything else is
                // carried as text (and the message is opaque).
                let known = p.get("thoughtSignature").is_some() || p.get("thought").is_some();
                let text = if known { String::new() } else { p.to_string() };
                json!({"type": "text", "text": text})
            }
        })
        .collect();
    Value::Array(out)
}

/// The fields the estimate reads, in chat-completions names (`model`
/// when given: the fast path reads it from the path later).
pub(super) fn estimate_fields(
    fields: &Map<String, Value>,
    model: Option<&str>,
) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(model) = model {
        out.insert("model".into(), Value::String(model.to_string()));
    }
    let declarations = fields
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
        .flatten();
    let tools: Vec<Value> = declarations
        .map(|d| {
            let parameters = d
                .get("parameters")
                .or_else(|| d.get("parametersJsonSchema"))
                .cloned()
                .unwrap_or(Value::Null);
            json!({"type": "function", "function": {
                "name": d.get("name").cloned().unwrap_or(Value::Null),
                "description": d.get("description").cloned().unwrap_or(Value::Null),
                "parameters": parameters,
            }})
        })
        .collect();
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
    }
    // Gemini's window is its input limit (`inputTokenLimit`, the limit its
    // "input token count exceeds" error names); the output has a limit of
    // its own. So nothing of the window is kept for `maxOutputTokens`.
    out.insert("max_tokens".into(), Value::from(0));
    out
}

/// Refills `contents` from the view and appends the summary to the
/// system instruction.
pub fn encode(fields: &mut Map<String, Value>, wire: &Wire, items: Vec<Item>) {
    let mut summary = None;
    let mut contents = Vec::with_capacity(wire.items.len() + 1);
    for item in items {
        match item {
            Item::Original(i) => contents.extend(original(wire, i).iter().cloned()),
            Item::New(made) => summary = Some(text_of(&made["content"])),
            Item::Stub(i, stub) => {
                let text = stub.get("content").and_then(Value::as_str).unwrap_or("");
                contents.extend(original(wire, i).iter().map(|c| stubbed(c, text)));
            }
        }
    }
    if let Some(text) = summary {
        let starts_with_user = contents
            .first()
            .and_then(|c| c.get("role"))
            .and_then(Value::as_str)
            == Some("user");
        if !starts_with_user {
            contents.insert(
                0,
                json!({"role": "user", "parts": [{"text": CONTINUE_TEXT}]}),
            );
        }
        let name = system_field(fields).unwrap_or(SYSTEM_FIELDS[0]);
        let mut system = match fields.remove(name) {
            Some(Value::Object(system)) => system,
            _ => Map::new(),
        };
        let part = json!({"text": text});
        match system.get_mut("parts") {
            Some(Value::Array(parts)) => parts.push(part),
            _ => {
                system.insert("parts".into(), Value::Array(vec![part]));
            }
        }
        fields.insert(name.into(), Value::Object(system));
    }
    fields.insert("contents".into(), Value::Array(joined_user_turns(contents)));
}

/// `contents` with adjacent user turns joined into one, their parts in
/// order: a view puts pinned turns and the kept task next to each other,
/// and Gemini wants user and model turns to alternate.
fn joined_user_turns(contents: Vec<Value>) -> Vec<Value> {
    let is_user = |c: &Value| c.get("role").and_then(Value::as_str) == Some("user");
    let mut out: Vec<Value> = Vec::with_capacity(contents.len());
    for content in contents {
        if let Some(last) = out
            .last_mut()
            .filter(|last| is_user(last) && is_user(&content))
        {
            if let (Some(Value::Array(into)), Value::Array(more)) =
                (last.get_mut("parts"), content["parts"].clone())
            {
                into.extend(more);
                continue;
            }
        }
        out.push(content);
    }
    out
}

/// The contents engine message `i` stands for.
fn original(wire: &Wire, i: usize) -> &[Value] {
    match wire.units.get(i) {
        Some(Some(range)) => wire.items.get(range.clone()).unwrap_or_default(),
        _ => &[],
    }
}

/// A content whose function responses are compressed: each keeps its
/// name and id, its result becomes the stub's text.
fn stubbed(content: &Value, text: &str) -> Value {
    let mut content = content.clone();
    if let Some(Value::Array(parts)) = content.get_mut("parts") {
        for part in parts {
            if let Some(r) = part
                .get_mut("functionResponse")
                .and_then(Value::as_object_mut)
            {
                r.insert("response".into(), json!({"content": text}));
            }
        }
    }
    content
}

/// Puts recalled excerpts (`block`) in front of the last user turn that
/// is not a function response, as a text part of it (a turn of their own
/// would break the alternation of roles).
pub fn place_recalled(contents: &mut [Value], block: &str) {
    let is_user_text = |c: &Value| {
        c.get("role").and_then(Value::as_str) == Some("user")
            && !parts(c).iter().any(|p| p.get("functionResponse").is_some())
    };
    if let Some(turn) = contents.iter_mut().rev().find(|c| is_user_text(c)) {
        if let Some(Value::Array(parts)) = turn.get_mut("parts") {
            parts.insert(0, json!({"text": block}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Role, tool_call_id, tool_call_ids};

    #[test]
    fn model_from_the_path() {
        let m = model_in_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent");
        assert_eq!(m, Some("gemini-2.5-flash"));
        assert_eq!(model_in_path("/v1beta/models/:generateContent"), None);
        assert_eq!(model_in_path("/v1/chat/completions"), None);
        assert_eq!(model_in_path("/models/"), None);
        assert_eq!(
            model_in_path("/v1/models/m/models/g:generateContent"),
            Some("g")
        );
    }

    #[test]
    fn calls_and_responses_pair_by_position() {
        let body = json!({
            "systemInstruction": {"parts": [{"text": "be brief"}]},
            "contents": [
                {"role": "user", "parts": [{"text": "list"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"p": "."}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"out": "a.txt"}}}]},
                {"role": "model", "parts": [{"text": "a.txt"}]}]});
        let d = decode(body.as_object().cloned().unwrap_or_default(), "g").unwrap();
        assert_eq!(d.messages.len(), 5);
        assert_eq!(
            d.messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        let ids: Vec<_> = tool_call_ids(&d.messages[2])
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(ids, ["gemini-1-0"]);
        assert_eq!(Role::of_message(&d.messages[3]), Some(Role::Tool));
        assert_eq!(tool_call_id(&d.messages[3]), Some("gemini-1-0"));
        assert!(text_of(&d.messages[3]["content"]).contains("a.txt"));
        assert_eq!(d.estimate_fields()["model"], "g");
    }

    #[test]
    fn summary_goes_into_the_system_instruction() {
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": "a"}]},
            {"role": "model", "parts": [{"text": "b"}]},
            {"role": "user", "parts": [{"text": "c"}]}]});
        let d = decode(body.as_object().cloned().unwrap_or_default(), "g").unwrap();
        let mut fields = d.fields;
        let summary = json!({"role": "system", "content": "SUMMARY"});
        let view = vec![Item::New(summary), Item::Original(1), Item::Original(2)];
        encode(&mut fields, d.wire.as_ref().unwrap(), view);
        assert_eq!(
            fields["systemInstruction"],
            json!({"parts": [{"text": "SUMMARY"}]})
        );
        let contents = fields["contents"].as_array().unwrap();
        assert_eq!(contents[0]["parts"][0]["text"], CONTINUE_TEXT);
        assert_eq!(contents[1]["role"], "model");
        assert_eq!(contents.len(), 3);
    }

    #[test]
    fn pinned_turns_and_the_kept_task_join_into_one_user_turn() {
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": "--- Context from: GEMINI.md ---"}]},
            {"role": "model", "parts": [{"text": "Got it."}]},
            {"role": "user", "parts": [{"text": "task"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {}}}]},
            {"role": "model", "parts": [{"text": "done"}]}]});
        let d = decode(body.as_object().cloned().unwrap_or_default(), "g").unwrap();
        let mut fields = d.fields;
        let summary = json!({"role": "system", "content": "SUMMARY"});
        let view = vec![
            Item::Original(0),
            Item::New(summary),
            Item::Original(2),
            Item::Original(5),
        ];
        encode(&mut fields, d.wire.as_ref().unwrap(), view);
        assert_eq!(
            fields["contents"],
            json!([
                {"role": "user", "parts": [{"text": "--- Context from: GEMINI.md ---"}, {"text": "task"}]},
                {"role": "model", "parts": [{"text": "done"}]}])
        );
    }

    #[test]
    fn media_parts_are_priced_as_media() {
        let content = json!({"role": "user", "parts": [
            {"text": "look"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
            {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/x.pdf"}}]});
        let m = engine_message(0, &content, None);
        assert_eq!(
            m["content"],
            json!([{"type": "text", "text": "look"}, {"type": "image"}, {"type": "file"}])
        );
    }

    #[test]
    fn recalled_excerpts_join_the_last_user_turn() {
        let mut contents = vec![
            json!({"role": "user", "parts": [{"text": "q"}]}),
            json!({"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {}}}]}),
        ];
        place_recalled(&mut contents, "BLOCK");
        assert_eq!(contents.len(), 3);
        assert_eq!(contents[0]["parts"][0]["text"], "BLOCK");
        assert_eq!(contents[0]["parts"][1]["text"], "q");
    }
}
