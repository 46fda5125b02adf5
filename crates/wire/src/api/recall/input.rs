//! What the model hands a recall call, distrusted: its arguments checked
//! and its query bounded before it is searched or echoed back, and answers
//! whose JSON holds lone surrogate escapes (which serde_json rejects) made
//! readable, so a recall call in them is still found and answered instead
//! of reaching the client.

use crate::message::RECALL_TOOL;
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
pub fn bounded(arguments: &str) -> Value {
    query(arguments).map_or_else(|_| json!({}), |q| json!({ "query": q }))
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
