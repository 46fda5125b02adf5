//! What the model hands a recall call, distrusted: its arguments checked
//! and its query bounded before it is searched or echoed back, and answers
//! whose JSON holds lone surrogate escapes (which serde_json rejects) made
//! readable, so a recall call in them is still found and answered instead
//! of reaching the client.

use super::super::codec::Api;
use crate::archive::RECALL_TOOL;
use serde_json::{Value, json};

/// Longest query searched and echoed in the result, in characters: a
/// recall query is a few words or an identifier; a longer one would only
/// grow the next request (a 1 MB query made it 2 MB).
pub const MAX_QUERY_CHARS: usize = 300;

/// The query of a call's `arguments`, trimmed and cut to
/// [`MAX_QUERY_CHARS`] at a character boundary; else one line saying why
/// the arguments are not `{"query": "…"}`, for the tool result.
pub fn query(arguments: &str) -> Result<String, String> {
    let usage =
        format!("{RECALL_TOOL} takes JSON arguments {{\"query\": \"words to search for\"}}");
    let args: Value = serde_json::from_str(arguments)
        .map_err(|e| format!("{usage}; these are not JSON ({e})."))?;
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .ok_or_else(|| format!("{usage}."))?;
    // A lone surrogate escape in the answer was read as U+FFFD (see
    // `parse`): the query was not what the model meant to send.
    if query.contains(char::REPLACEMENT_CHARACTER) {
        return Err(format!(
            "{usage}; this query holds an invalid character (a lone surrogate escape)."
        ));
    }
    let end = query
        .char_indices()
        .nth(MAX_QUERY_CHARS)
        .map_or(query.len(), |(i, _)| i);
    Ok(query[..end].trim_end().to_string())
}

/// The arguments a call is kept with in foldgate's copy of the request:
/// `{"query": …}` bounded as [`query`] cuts it, or `{}` when the model's
/// arguments were not a query (its result says why), so what the model
/// sent, however large, is not sent again with every later round.
fn bounded(arguments: &str) -> Value {
    query(arguments).map_or_else(|_| json!({}), |q| json!({ "query": q }))
}

/// Rewrites the recall calls of a turn's messages (in `api`'s shape) to
/// carry [`bounded`] arguments.
pub fn bound(api: Api, messages: &mut [Value]) {
    let named =
        |v: &Value, pointer: &str| v.pointer(pointer).and_then(Value::as_str) == Some(RECALL_TOOL);
    for message in messages.iter_mut() {
        match api {
            Api::Chat => {
                if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                    for call in calls.iter_mut().filter(|c| named(c, "/function/name")) {
                        let args = call.pointer("/function/arguments").and_then(Value::as_str);
                        let args = bounded(args.unwrap_or_default()).to_string();
                        call["function"]["arguments"] = Value::String(args);
                    }
                }
            }
            Api::Anthropic => {
                if let Some(Value::Array(blocks)) = message.get_mut("content") {
                    let calls = blocks.iter_mut().filter(|b| {
                        b.get("type").and_then(Value::as_str) == Some("tool_use")
                            && named(b, "/name")
                    });
                    for block in calls {
                        let input = block.get("input").map(Value::to_string);
                        block["input"] = bounded(&input.unwrap_or_default());
                    }
                }
            }
            Api::Responses => {
                let is_call = message.get("type").and_then(Value::as_str) == Some("function_call");
                if is_call && named(message, "/name") {
                    let args = message.get("arguments").and_then(Value::as_str);
                    let args = bounded(args.unwrap_or_default()).to_string();
                    message["arguments"] = Value::String(args);
                }
            }
        }
    }
}

/// The JSON value of `bytes`; when the strict parse fails, lone surrogate
/// escapes are replaced by `\ufffd` and the parse tried once more.
pub fn parse(bytes: &[u8]) -> Option<Value> {
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        return Some(value);
    }
    let repaired = without_lone_surrogates(bytes)?;
    serde_json::from_slice::<Value>(&repaired).ok()
}

/// `bytes` with every `\uD800`–`\uDFFF` escape that is not half of a
/// pair replaced by `\ufffd`; `None` when there is none to replace.
fn without_lone_surrogates(bytes: &[u8]) -> Option<Vec<u8>> {
    let escape_at = |i: usize| -> Option<u16> {
        let hex = bytes.get(i..i + 6)?.strip_prefix(b"\\u")?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let high = |u: u16| (0xD800..0xDC00).contains(&u);
    let low = |u: u16| (0xDC00..0xE000).contains(&u);
    let mut out = Vec::with_capacity(bytes.len());
    let (mut i, mut replaced) = (0, false);
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        match escape_at(i) {
            Some(u) if high(u) && escape_at(i + 6).is_some_and(low) => {
                out.extend_from_slice(&bytes[i..i + 12]);
                i += 12;
            }
            Some(u) if high(u) || low(u) => {
                out.extend_from_slice(b"\\ufffd");
                replaced = true;
                i += 6;
            }
            // Any other escape (an escaped backslash included) is copied
            // whole, so its second character is never read as a start.
            _ => {
                out.extend_from_slice(&bytes[i..(i + 2).min(bytes.len())]);
                i += 2;
            }
        }
    }
    replaced.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn queries_are_bounded_at_a_character_boundary() {
        let long = "é".repeat(5_000);
        let args = json!({ "query": long }).to_string();
        let cut = query(&args).unwrap_or_default();
        assert_eq!(cut.chars().count(), MAX_QUERY_CHARS);
        assert_eq!(
            query(r#"{"query": "  vault code "}"#),
            Ok("vault code".into())
        );
    }

    #[test]
    fn bad_arguments_get_one_line_saying_why() {
        for bad in [
            "not json",
            "[1, 2]",
            r#"{"query": 7}"#,
            r#"{"q": "x"}"#,
            r#"{"query": "  "}"#,
            r#"{"query": "\ud800 vault"}"#,
            "{\"query\": \"\u{fffd} vault\"}",
        ] {
            let why = query(bad).err().unwrap_or_default();
            assert!(why.contains("{\"query\""), "{bad}: {why}");
            assert!(!why.contains('\n'), "{bad}: {why}");
        }
    }

    #[test]
    fn calls_go_back_with_their_bounded_query_on_every_api() {
        let huge = json!({ "query": "x".repeat(1 << 20) }).to_string();
        let cut = json!({ "query": "x".repeat(MAX_QUERY_CHARS) });
        let mut chat = vec![json!({"role": "assistant", "tool_calls": [
            {"id": "a", "function": {"name": RECALL_TOOL, "arguments": huge}},
            {"id": "b", "function": {"name": "ls", "arguments": "{\"p\": 1}"}}]})];
        bound(Api::Chat, &mut chat);
        assert_eq!(
            chat[0]["tool_calls"][0]["function"]["arguments"],
            cut.to_string()
        );
        assert_eq!(
            chat[0]["tool_calls"][1]["function"]["arguments"],
            "{\"p\": 1}"
        );
        let input: Value = serde_json::from_str(&huge).unwrap_or_default();
        let mut anthropic = vec![json!({"role": "assistant", "content": [
            {"type": "text", "text": "hm"},
            {"type": "tool_use", "id": "a", "name": RECALL_TOOL, "input": input}]})];
        bound(Api::Anthropic, &mut anthropic);
        assert_eq!(anthropic[0]["content"][1]["input"], cut);
        let mut responses = vec![
            json!({"type": "function_call", "call_id": "a", "name": RECALL_TOOL, "arguments": "not json"}),
        ];
        bound(Api::Responses, &mut responses);
        assert_eq!(responses[0]["arguments"], "{}");
    }

    #[test]
    fn lone_surrogates_are_repaired_and_pairs_kept() {
        let body = br#"{"a": "\ud800 vault", "b": "\ud83d\ude00", "c": "\\ud800", "d": "x\udc00"}"#;
        let value = parse(body).unwrap_or_default();
        assert_eq!(value["a"], "\u{fffd} vault");
        assert_eq!(value["b"], "\u{1f600}");
        assert_eq!(
            value["c"], "\\ud800",
            "an escaped backslash is not an escape"
        );
        assert_eq!(value["d"], "x\u{fffd}");
        assert_eq!(parse(br#"{"ok": 1}"#), Some(json!({"ok": 1})));
        assert_eq!(parse(b"GARBAGE"), None);
    }
}
