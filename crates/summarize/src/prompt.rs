//! The summarizer's prompt: rules, JSON schema, and the transcript of the
//! messages to fold.

use crate::fold::Summary;
use serde_json::{Value, json};
use std::fmt::Write;

pub use crate::api::summary::Format;

/// The summarizer's standing instructions (docs/folding.md, "Keys,
/// triggers and the summarizer" and "Nothing is lost").
pub const SYSTEM_PROMPT: &str = "\
You maintain the running memory of a long conversation between a user and an AI assistant. \
You receive the current summary (possibly empty) and the next messages of the conversation. \
Rewrite the summary so it covers everything: return ONE complete new summary, not an addition.

Rules:
- Keep identifiers, numbers, names, file paths, URLs, commands, versions and code symbols verbatim.
- Invent nothing. Record only what the messages say.
- When decisions conflict, keep the most recent explicit decision and drop the superseded one.
- A proposal, plan or intention is not a completed action: say \"proposed\" or \"planned\" unless the messages show it was done.
- Keep finished work apart from pending work: \"completed\" lists what the messages show was done (with its ids, e.g. a todo's id or a commit), \"open_items\" only what is still to do. Never list finished work as open: the assistant would redo it.
- Keep every fact, goal, decision, open item and artifact of the current summary that is still true.
- No transcript, no filler, no pleasantries, no commentary on tone.

Answer with a single JSON object and nothing else:
{\"summary\": \"short narrative\", \"facts\": [\"...\"], \"goals\": [\"...\"], \"decisions\": [\"...\"], \"completed\": [\"...\"], \"open_items\": [\"...\"], \"artifacts\": [\"...\"]}";

/// The JSON schema of the summary object, for `response_format`.
pub fn schema() -> Value {
    let list = json!({ "type": "array", "items": { "type": "string" } });
    json!({
        "type": "object",
        "properties": {
            "summary": { "type": "string" },
            "facts": list, "goals": list, "decisions": list,
            "completed": list, "open_items": list, "artifacts": list,
        },
        "required": ["summary", "facts", "goals", "decisions", "completed", "open_items", "artifacts"],
        "additionalProperties": false,
    })
}

/// The user message: the current summary, then the transcript to fold.
pub fn user_prompt(current: Option<&Summary>, transcript: &str) -> String {
    let current = match current {
        Some(s) => serde_json::to_string_pretty(s).unwrap_or_default(),
        None => "(none yet)".to_string(),
    };
    format!(
        "Current summary:\n{current}\n\nNew messages to fold into it:\n{transcript}\n\n\
         Return the complete rewritten summary as one JSON object."
    )
}

/// What a retry adds to the prompt after `failures` unusable answers in a
/// row.
pub fn retry_hint(error: &str, truncated: bool, failures: u32) -> String {
    let mut hint = if failures > 1 {
        format!("Your previous {failures} answers could not be used; the last one: {error}.")
    } else {
        format!("Your previous answer could not be used: {error}.")
    };
    if truncated {
        // Each cut-off answer asks for less, so no retry repeats a request.
        let items = (6u32 >> failures.saturating_sub(1).min(2)).max(1);
        hint.push_str(&format!(
            " Be brief this time: a narrative of at most three sentences and at most {items} short items per list."
        ));
    }
    hint.push_str(" Answer again with one JSON object whose summary is a string and whose lists hold plain strings.");
    hint
}

/// Renders messages as a compact transcript, one block per message, with
/// tool calls and tool results labelled.
pub fn transcript(messages: &[&Value]) -> String {
    let mut out = String::new();
    for message in messages {
        render_message(&mut out, message);
    }
    out
}

/// Renders one message; appended to `out`.
pub fn render_message(out: &mut String, message: &Value) {
    let role = message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let _ = write!(out, "### {role}");
    if let Some(name) = message.get("name").and_then(Value::as_str) {
        let _ = write!(out, " ({name})");
    }
    if let Some(id) = message.get("tool_call_id").and_then(Value::as_str) {
        let _ = write!(out, " [result of {id}]");
    }
    out.push('\n');
    let content = content_text(message.get("content"));
    if !content.is_empty() {
        out.push_str(&content);
        out.push('\n');
    }
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let id = call.get("id").and_then(Value::as_str).unwrap_or("");
        let f = call.get("function");
        let name = f
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        let args = f
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let _ = writeln!(out, "-> tool call {name}({args}) [{id}]");
    }
    if let Some(f) = message.get("function_call") {
        let name = f.get("name").and_then(Value::as_str).unwrap_or("?");
        let args = f.get("arguments").and_then(Value::as_str).unwrap_or("");
        let _ = writeln!(out, "-> function call {name}({args})");
    }
    out.push('\n');
}

/// Text of a message's content: a string, or the text of each part. A
/// part that carries text gives it whatever its type (`text`,
/// `input_text`, `output_text`, `refusal`, a tool result's content, a
/// plain-text document); one that carries none (an image, audio, a file)
/// is named in brackets, the only marker the summarizer sees.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(part_text)
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The text of one content part, or its kind in brackets when it has none.
fn part_text(part: &Value) -> String {
    let Value::Object(fields) = part else {
        return part
            .as_str()
            .map_or_else(|| part.to_string(), str::to_string);
    };
    let text = ["text", "refusal", "thinking"]
        .iter()
        .find_map(|k| fields.get(*k).and_then(Value::as_str));
    if let Some(text) = text {
        return text.to_string();
    }
    if let Some(inner) = fields.get("content") {
        return content_text(Some(inner));
    }
    if let Some(data) = fields
        .get("source")
        .filter(|s| s.get("type").and_then(Value::as_str) == Some("text"))
        .and_then(|s| s.get("data"))
        .and_then(Value::as_str)
    {
        return data.to_string();
    }
    match fields.get("type").and_then(Value::as_str) {
        Some(kind) => format!("[{kind}]"),
        None => part.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_labels_tools_and_parts() {
        let msgs = [
            json!({"role":"user","name":"ann","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"x"}}]}),
            json!({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"p\":\"a.rs\"}"}}]}),
            json!({"role":"tool","tool_call_id":"c1","content":"fn main() {}"}),
        ];
        let refs: Vec<&Value> = msgs.iter().collect();
        let t = transcript(&refs);
        assert!(t.contains("### user (ann)\nlook\n[image_url]"), "{t}");
        assert!(
            t.contains("-> tool call read({\"p\":\"a.rs\"}) [c1]"),
            "{t}"
        );
        assert!(t.contains("### tool [result of c1]\nfn main() {}"), "{t}");
    }

    #[test]
    fn every_part_that_carries_text_gives_it() {
        let content = json!([
            {"type": "input_text", "text": "asked"},
            {"type": "output_text", "text": "answered", "annotations": []},
            {"type": "refusal", "refusal": "declined"},
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "inner"}]},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc text"}},
            {"type": "input_image", "image_url": "x"},
        ]);
        let text = content_text(Some(&content));
        assert_eq!(
            text,
            "asked\nanswered\ndeclined\ninner\ndoc text\n[input_image]"
        );
    }
}
